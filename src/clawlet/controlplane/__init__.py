"""The control plane of cluster mode: the server users and exec planes connect to (its HTTP API,
the ``/ws/vm`` socket, the admin CLI, auth, the database, event logs, routing and the broker
between instances)."""
