"""mqctl says the SDK's transport failures from the errors' fields (request code, address, status, timeout), not by
parsing their text (issue 22 item 13)."""

from __future__ import annotations

import asyncio

from client.errors import BrokerUnreachableError, NoNameserverError, RequestTimeout
from client.rpc import ClientRemoting, command
from ctl.errors import describe, transport_reason
from harness.procs import free_port
from remoting.codes import RequestCode


async def _unreachable(what: str, code: int) -> BrokerUnreachableError:
    remoting = ClientRemoting(connect_timeout_s=1.0)
    addr = f"127.0.0.1:{free_port()}"
    try:
        await remoting.invoke(addr, command(code), 1.0, what)
    except BrokerUnreachableError as exc:
        return exc
    finally:
        await remoting.close()
    raise AssertionError("a closed port answered")


def test_a_refused_connection_names_the_request_by_its_code_whatever_the_sdk_called_it():
    what = "send of 3 messages to MessageQueue[T, broker-a, 1]"
    exc = asyncio.run(_unreachable(what, RequestCode.SEND_BATCH_MESSAGE))
    assert exc.status == "CONNECT_FAILED" and exc.request_code == RequestCode.SEND_BATCH_MESSAGE
    line = describe(exc)
    assert line.startswith(f"broker {exc.addr} did not answer SEND_BATCH_MESSAGE (cannot connect)"), line


def test_a_timeout_says_its_deadline_from_the_field():
    exc = RequestTimeout("127.0.0.1:10911", 2.5, request="whatever the text says", request_code=28)
    line = describe(exc)
    assert line.startswith("broker 127.0.0.1:10911 did not answer GET_BROKER_RUNTIME_INFO (no answer within 2.5s)")
    assert transport_reason(exc) == "no answer within 2.5s"


def test_no_nameserver_keeps_the_last_error_as_an_object():
    last = asyncio.run(_unreachable("", RequestCode.GET_ROUTEINFO_BY_TOPIC))
    exc = NoNameserverError([last.addr], last)
    assert exc.last is last and last.message in str(exc)
    assert transport_reason(exc.last) == "cannot connect"
    assert transport_reason(None) == "no answer"
