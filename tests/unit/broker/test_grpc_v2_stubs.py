"""The committed apache.rocketmq.v2 stubs in broker/grpc_v2/pb are exactly what `make proto` generates from the
vendored protos in broker/grpc_v2/proto."""

from __future__ import annotations

from broker.grpc_v2.build_proto import PB_DIR, generate


def test_committed_stubs_match_a_fresh_generation(tmp_path):
    fresh = {p.name: p.read_text() for p in generate(tmp_path)}
    fresh["__init__.py"] = (tmp_path / "__init__.py").read_text()
    committed = {p.name: p.read_text() for p in PB_DIR.glob("*.py")}
    assert sorted(committed) == sorted(fresh), "run `make proto` and commit broker/grpc_v2/pb"
    stale = [name for name in fresh if committed[name] != fresh[name]]
    assert not stale, f"stale stubs {stale}: run `make proto` and commit broker/grpc_v2/pb"


def test_the_service_has_the_rpcs_the_official_client_calls():
    from broker.grpc_v2.pb import service_pb2

    methods = set(service_pb2.DESCRIPTOR.services_by_name["MessagingService"].methods_by_name)
    needed = {"QueryRoute", "Heartbeat", "SendMessage", "QueryAssignment", "ReceiveMessage", "AckMessage",
              "ForwardMessageToDeadLetterQueue", "EndTransaction", "Telemetry", "NotifyClientTermination",
              "ChangeInvisibleDuration", "RecallMessage"}
    assert needed <= methods
