"""How the chaos workload files a send's outcome (the checker's input): only a status or a refusal that proves
the message was (not) stored counts as acked, weak or failed; everything else is unknown."""

from __future__ import annotations

import pytest

from client import BrokerError, BrokerUnreachableError, MessageQueue, NoRouteError, RequestTimeout, SendResult
from client import SendStatus as S
from harness.chaos.workload import classify
from harness.checker import Outcome
from remoting.codes import ResponseCode as C
from remoting.message_codec import offset_msg_id

MQ = MessageQueue("T", "b", 0)


@pytest.mark.parametrize(("status", "outcome"), [(S.SEND_OK, Outcome.ACKED), (S.FLUSH_DISK_TIMEOUT, Outcome.WEAK),
                                                 (S.FLUSH_SLAVE_TIMEOUT, Outcome.WEAK),
                                                 (S.SLAVE_NOT_AVAILABLE, Outcome.WEAK)])
def test_a_send_result_is_acked_or_weak_with_its_commitlog_offset(status, outcome):
    result = SendResult(status, "ID", offset_msg_id(("10.0.0.1", 10911), 123456), MQ, 7)
    assert classify(result) == (outcome, 123456, status.value)


@pytest.mark.parametrize(("error", "outcome"), [
    (BrokerError(C.SYSTEM_BUSY, "busy", "a:1"), Outcome.FAILED),
    (BrokerError(C.SERVICE_NOT_AVAILABLE, "disk full", "a:1"), Outcome.FAILED),
    (BrokerError(C.MESSAGE_ILLEGAL, "too big", "a:1"), Outcome.FAILED),
    (NoRouteError("T"), Outcome.FAILED),
    (BrokerError(C.SYSTEM_ERROR, "failed after the append?", "a:1"), Outcome.UNKNOWN),
    (RequestTimeout("a:1", 5.0), Outcome.UNKNOWN),
    (BrokerUnreachableError("a:1", "CONNECTION_CLOSED"), Outcome.UNKNOWN),
    (RuntimeError("anything else"), Outcome.UNKNOWN),
])
def test_an_error_is_failed_only_when_it_proves_nothing_was_stored(error, outcome):
    assert classify(error)[0] is outcome


def test_a_result_without_a_usable_offset_id_has_no_offset():
    assert classify(SendResult(S.SEND_OK, "ID", "", MQ, 0)) == (Outcome.ACKED, None, "SEND_OK")
