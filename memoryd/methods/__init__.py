"""RPC methods, one module per namespace. Thin: validate (the models do), call a service, shape the answer."""
