"""harness.log_scan on sample server logs: the programming errors it must find and the expected errors it must not."""

from __future__ import annotations

from harness.log_scan import find_programming_errors

ROOT = "/srv/pyrmq"

# Captured from a master's log at ca6730d (broker/slave_notify.py called self._served, which never existed): the
# bug the scan exists for. Paths rewritten from the tree it ran in to ROOT.
SLAVE_NOTIFY_ATTRIBUTE_ERROR = """\
2026-11-29 02:02:10,072 INFO  broker.slave_notify: slave 127.0.0.1:51810 subscribed to metadata changes
2026-11-29 02:02:10,072 ERROR remoting.connection: broker: request code 9101 from 127.0.0.1:51810 failed
Traceback (most recent call last):
  File "/srv/pyrmq/remoting/connection.py", line 543, in _on_request
    result = dispatch(self, cmd)
             ^^^^^^^^^^^^^^^^^^^
  File "/srv/pyrmq/remoting/server.py", line 90, in _dispatch
    return processor(conn, cmd)
           ^^^^^^^^^^^^^^^^^^^^
  File "/srv/pyrmq/broker/processors/slave_sync_serve.py", line 110, in <lambda>
    server.register(RequestCode.NOTIFY_METADATA_CHANGED, lambda conn, req: held(ctx, conn, req))
                                                                           ^^^^^^^^^^^^^^^^^^^^
  File "/srv/pyrmq/broker/processors/slave_sync_serve.py", line 94, in held
    notifier.held(conn, kind, int(value))
  File "/srv/pyrmq/broker/slave_notify.py", line 144, in held
    self._served.set()
    ^^^^^^^^^^^^
AttributeError: 'SlaveNotifier' object has no attribute '_served'
2026-11-29 02:02:14,247 INFO  broker.slave_notify: slave 127.0.0.1:51810 no longer subscribed to metadata changes
"""

CONNECTION_RESET = """\
2026-11-29 02:05:01,100 ERROR broker.ha.client: HA connection to master 127.0.0.1:40001 failed
Traceback (most recent call last):
  File "/srv/pyrmq/broker/ha/client.py", line 120, in _read_loop
    data = await reader.read(65536)
           ^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/lib/python3.11/asyncio/streams.py", line 694, in read
    await self._wait_for_data('read')
ConnectionResetError: [Errno 104] Connection reset by peer
2026-11-29 02:05:01,300 INFO  broker.ha.client: reconnecting to master 127.0.0.1:40001
"""

SUPPRESSED_TYPE_ERROR = """\
2026-11-29 02:06:00,000 ERROR remoting.connection: broker: request code 10 from 127.0.0.1:5000 failed \
(37 similar lines suppressed)
Traceback (most recent call last):
  File "/srv/pyrmq/remoting/connection.py", line 543, in _on_request
    result = dispatch(self, cmd)
  File "/srv/pyrmq/broker/processors/send.py", line 77, in send
    return encode(header, None)
TypeError: encode() takes 1 positional argument but 2 were given
"""

KEY_ERROR_OWN = """\
2026-11-29 02:07:00,000 ERROR remoting.connection: broker: request code 11 from 127.0.0.1:5000 failed
Traceback (most recent call last):
  File "/srv/pyrmq/broker/processors/pull.py", line 40, in pull
    queue = topic.queues[qid]
            ~~~~~~~~~~~~^^^^^
KeyError: 7
"""

KEY_ERROR_LIBRARY = """\
2026-11-29 02:07:00,000 ERROR broker.grpc_v2.endpoint: stream failed
Traceback (most recent call last):
  File "/srv/pyrmq/broker/grpc_v2/endpoint.py", line 40, in serve
    await call.read()
  File "/srv/pyrmq/.venv/lib/python3.11/site-packages/grpc/aio/_call.py", line 300, in read
    raise KeyError(key)
KeyError: 'x'
"""

# A KeyError turned into a clean refusal (the chain shows it; what escaped is the ValueError), then a handler that
# broke while handling a reset connection (what escaped is the AttributeError).
CHAINS = """\
2026-11-29 02:03:19,939 ERROR broker.x: refused
Traceback (most recent call last):
  File "/srv/pyrmq/broker/x.py", line 16, in main
    {}["t"]
    ~~^^^^^
KeyError: 't'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/srv/pyrmq/broker/x.py", line 18, in main
    raise ValueError("unknown topic t") from e
ValueError: unknown topic t
2026-11-29 02:03:20,000 ERROR broker.x: cleanup failed
Traceback (most recent call last):
  File "/srv/pyrmq/broker/x.py", line 30, in close
    await writer.drain()
ConnectionResetError: [Errno 104] Connection reset by peer

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/srv/pyrmq/broker/x.py", line 33, in close
    self._conn.abort()
    ^^^^^^^^^^^^^^^^
AttributeError: 'NoneType' object has no attribute 'abort'
"""

TASK_GROUP = """\
2026-11-29 02:03:19,938 ERROR broker.x: service failed
  + Exception Group Traceback (most recent call last):
  |   File "/srv/pyrmq/broker/x.py", line 10, in main
  |     async with asyncio.TaskGroup() as tg:
  |   File "/usr/lib/python3.11/asyncio/taskgroups.py", line 145, in __aexit__
  |     raise me from None
  | ExceptionGroup: unhandled errors in a TaskGroup (2 sub-exceptions)
  +-+---------------- 1 ----------------
    | Traceback (most recent call last):
    |   File "/srv/pyrmq/broker/x.py", line 5, in bad
    |     raise ConnectionResetError()
    | ConnectionResetError
    +---------------- 2 ----------------
    | Traceback (most recent call last):
    |   File "/srv/pyrmq/broker/x.py", line 7, in worse
    |     return undefined_name
    | NameError: name 'undefined_name' is not defined
    +------------------------------------
"""

ASYNCIO_DEATHS = """\
2026-11-29 02:03:19,950 ERROR asyncio: Task exception was never retrieved
future: <Task finished name='Task-4' coro=<bad() done, defined at /srv/pyrmq/broker/x.py:4> exception=OSError()>
Traceback (most recent call last):
  File "/srv/pyrmq/broker/x.py", line 5, in bad
    raise OSError()
OSError
2026-11-29 02:03:19,950 ERROR asyncio: Exception in callback main.<locals>.<lambda>() at /srv/pyrmq/broker/x.py:24
handle: <Handle main.<locals>.<lambda>() at /srv/pyrmq/broker/x.py:24>
Traceback (most recent call last):
  File "/usr/lib/python3.11/asyncio/events.py", line 80, in _run
    self._context.run(self._callback, *self._args)
  File "/srv/pyrmq/broker/x.py", line 24, in <lambda>
    loop.call_soon(lambda: 1/0)
ZeroDivisionError: division by zero
/srv/pyrmq/broker/ha/master.py:88: RuntimeWarning: coroutine 'HAConnection.close' was never awaited
  conn.close()
RuntimeWarning: Enable tracemalloc to get the object allocation traceback
2026-11-29 02:03:20,000 INFO  broker.x: still serving
"""

# The same kind of record as pytest's logging plugin captures it from a server running inside the test process.
PYTEST_CAPTURED = """\
INFO     remoting.server:server.py:60 test: listening on 127.0.0.1:4000
ERROR    remoting.connection:connection.py:547 test: request code 9101 from 127.0.0.1:5000 failed
Traceback (most recent call last):
  File "/srv/pyrmq/remoting/connection.py", line 543, in _on_request
    result = dispatch(self, cmd)
UnboundLocalError: cannot access local variable 'kind' where it is not associated with a value
INFO     remoting.server:server.py:90 test: stopped
"""


def scan(text: str) -> list:
    return find_programming_errors(text, [ROOT])


def test_the_slave_notify_attribute_error_is_found_with_the_record_that_logged_it():
    [finding] = scan(SLAVE_NOTIFY_ATTRIBUTE_ERROR)
    assert finding.reason == "AttributeError"
    assert finding.excerpt.startswith("2026-11-29 02:02:10,072 ERROR remoting.connection: broker: request code 9101")
    assert finding.excerpt.endswith("AttributeError: 'SlaveNotifier' object has no attribute '_served'")
    assert finding.offset == SLAVE_NOTIFY_ATTRIBUTE_ERROR.index("AttributeError:")


def test_an_expected_connection_error_is_not_a_finding():
    assert scan(CONNECTION_RESET) == []


def test_the_rate_limited_form_is_found():
    [finding] = scan(SUPPRESSED_TYPE_ERROR)
    assert finding.reason == "TypeError"
    assert "(37 similar lines suppressed)" in finding.excerpt


def test_key_error_counts_only_when_raised_in_our_own_code():
    [finding] = scan(KEY_ERROR_OWN)
    assert finding.reason == "KeyError raised in /srv/pyrmq/broker/processors/pull.py"
    assert scan(KEY_ERROR_LIBRARY) == []  # an installed package under the repo's .venv is not our code


def test_only_the_exception_that_escaped_a_chain_counts():
    [finding] = scan(CHAINS)
    assert finding.reason == "AttributeError"
    assert finding.excerpt.startswith("2026-11-29 02:03:20,000 ERROR broker.x: cleanup failed")


def test_a_member_of_an_exception_group_is_judged_on_its_own():
    [finding] = scan(TASK_GROUP)
    assert finding.reason == "NameError"
    assert finding.excerpt.startswith("2026-11-29 02:03:19,938 ERROR broker.x: service failed")


def test_asyncio_reports_of_dead_tasks_callbacks_and_unawaited_coroutines_count_whatever_the_exception():
    findings = scan(ASYNCIO_DEATHS)
    assert [f.reason.split(": ", 1)[1] for f in findings] == [
        "Task exception was never retrieved", "Exception in callback ", "coroutine '?[\\w.<>]+'? was never awaited"]
    assert findings[0].excerpt.endswith("OSError")
    assert findings[1].excerpt.endswith("ZeroDivisionError: division by zero")
    assert "HAConnection.close" in findings[2].excerpt
    assert "still serving" not in findings[2].excerpt


def test_pytest_captured_log_format_is_understood():
    [finding] = scan(PYTEST_CAPTURED)
    assert finding.reason == "UnboundLocalError"
    assert finding.excerpt.startswith("ERROR    remoting.connection:connection.py:547")
    assert finding.excerpt.endswith("not associated with a value")


def test_a_clean_log_and_a_log_cut_mid_traceback_have_no_findings():
    assert scan("2026-11-29 02:00:00,000 INFO  broker: boot success\n") == []
    assert scan(SLAVE_NOTIFY_ATTRIBUTE_ERROR.split("AttributeError:")[0]) == []


def test_a_traceback_printed_outside_the_log_starts_its_excerpt_at_its_own_first_line():
    text = ("2026-11-29 02:00:00,000 INFO  broker: boot success\n"
            "Exception in thread flusher:\n"
            "Traceback (most recent call last):\n"
            '  File "/srv/pyrmq/broker/store/flush.py", line 9, in run\n'
            "    self.flsuh()\n"
            "AttributeError: 'Flusher' object has no attribute 'flsuh'\n")
    [finding] = scan(text)
    assert finding.excerpt.startswith("Exception in thread flusher:")
