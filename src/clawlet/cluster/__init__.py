"""Cluster mode (seed 001): what the control plane (:mod:`clawlet.controlplane`) and the exec plane
(:mod:`clawlet.execplane`) share — the ``/ws/vm`` wire format (:mod:`clawlet.cluster.protocol`) —
and the dev launcher that runs both on one machine (``clawlet cluster``,
:mod:`clawlet.cluster.local_cluster`)."""
