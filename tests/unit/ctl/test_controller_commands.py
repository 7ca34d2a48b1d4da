"""The controller commands' pure parts: GET_SYNC_STATE_DATA and GET_BROKER_EPOCH_CACHE bodies as the controller and
the broker write them, and refusals that say what to do."""

from __future__ import annotations

import orjson
import pytest

from broker.controller_mode import epoch_cache
from broker.store.epoch_file import EpochEntry
from ctl.controller import parse_epoch_cache, parse_sync_state_data, refusal
from ctl.errors import CtlError
from remoting.codes import ResponseCode as RC
from remoting.frame_codec import RemotingCommand


def test_sync_state_data_becomes_a_group_view():
    body = orjson.dumps({"replicasInfoTable": {"broker-a": {
        "masterBrokerId": 2, "masterAddress": "h:2", "masterEpoch": 3, "syncStateSetEpoch": 5,
        "inSyncReplicas": [{"brokerName": "broker-a", "brokerId": 2, "brokerAddress": "h:2", "alive": True}],
        "notInSyncReplicas": [{"brokerName": "broker-a", "brokerId": 1, "brokerAddress": "h:1", "alive": False}]}}})
    group = parse_sync_state_data(body)["broker-a"]
    assert (group.master_broker_id, group.master_epoch, group.sync_state_set) == (2, 3, [2])
    assert group.id_of("h:1") == 1 and group.id_of("h:9") is None
    assert [r["inSyncStateSet"] for r in group.replicas] == [False, True]


def test_a_body_that_does_not_parse_is_a_clear_error():
    with pytest.raises(CtlError, match="does not parse"):
        parse_sync_state_data(b'{"replicasInfoTable": {"a": {"inSyncReplicas": [{}]}}}')


def test_the_broker_epoch_cache_body_round_trips():
    entries = [EpochEntry(1, 0), EpochEntry(2, 500)]
    parsed = parse_epoch_cache(epoch_cache.body("C", "broker-a", 2, entries, 800))
    assert parsed["epochList"] == [{"epoch": 1, "startOffset": 0, "endOffset": 500},
                                   {"epoch": 2, "startOffset": 500, "endOffset": 800}]


def test_a_slave_answers_its_epochs_only_when_asked_for_any_role():
    kwargs = {"is_master": False, "cluster": "C", "broker_name": "b", "broker_id": 2, "entries": [EpochEntry(1, 0)],
              "max_offset": 10, "ha_server_addr": "h:1"}
    plain = RemotingCommand(1007)
    assert epoch_cache.answer(plain, **kwargs).code == RC.SYSTEM_ERROR  # a slave's truncation must not use it
    assert epoch_cache.answer(RemotingCommand(1007, ext={"anyRole": "true"}), **kwargs).code == RC.SUCCESS


def test_refusals_say_what_to_do():
    etcd = refusal("GET_SYNC_STATE_DATA", RC.CONTROLLER_NOT_LEADER,
                   "no controller can be active: etcd 127.0.0.1:2379 does not answer", ["h:9876"])
    assert "etcd" in str(etcd) and "majority" in str(etcd)
    assert "enableControllerInNamesrv" in str(refusal("x", RC.REQUEST_CODE_NOT_SUPPORTED, "", ["h:9876"]))
    assert "clusterList" in str(refusal("x", RC.CONTROLLER_BROKER_METADATA_NOT_EXIST, "no group", ["h:1"]))
