"""The HTTP front door: the FastAPI app, every router, the middlewares (security, body limits,
metrics), the console's server side and how errors are shaped on the wire."""
