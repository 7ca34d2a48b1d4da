"""A Telemetry stream that ends while a read of the client's commands is in flight abandons the read
(broker.grpc_v2.service.abandon): the read is cancelled, and one that finished anyway (the client's end of the
stream, before or racing the cancel) leaves no "Task exception was never retrieved" behind."""

from __future__ import annotations

import asyncio
import gc


from broker.grpc_v2.service import abandon


async def _commands():
    """A client's command stream that ends when its pending read is cancelled (the read then raises
    StopAsyncIteration, not CancelledError), as a stream closed by the client at that moment does."""
    yield "settings"
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        return


async def _reported_after(drop) -> list[str]:
    """What asyncio reports about a read that ended the stream once ``drop`` let go of it (and another read that
    was in flight)."""
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context["message"]))
    finished_iterator, racing_iterator = _commands().__aiter__(), _commands().__aiter__()
    await finished_iterator.__anext__()
    await racing_iterator.__anext__()
    finished = asyncio.ensure_future(finished_iterator.__anext__())
    racing = asyncio.ensure_future(racing_iterator.__anext__())
    await asyncio.sleep(0)
    finished.cancel()  # ends its stream: StopAsyncIteration before the Telemetry loop looks at it
    await asyncio.wait([finished])
    for read in (finished, racing):
        drop(read)
    await asyncio.wait([racing])
    await asyncio.sleep(0)  # done callbacks run
    del finished, racing
    gc.collect()
    return reported


async def test_abandoned_reads_are_cancelled_and_their_outcome_taken():
    assert await _reported_after(abandon) == []


async def test_cancelling_only_the_reads_still_pending_leaves_both_reported():
    """What the Telemetry loop did before: the check above can fail."""
    def cancel_pending(read):
        if not read.done():
            read.cancel()

    reported = await _reported_after(cancel_pending)
    assert reported == ["Task exception was never retrieved"] * 2


