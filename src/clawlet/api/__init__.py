"""HTTP edges: the FastAPI app factory and one router module per surface."""
