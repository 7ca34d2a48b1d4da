"""One module per RPC family; each handler is ``async def handle(ctx, request) -> response``."""
