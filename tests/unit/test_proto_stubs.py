"""The committed gRPC stubs in remoting/pb are exactly what `make proto` generates from remoting/proto."""

from __future__ import annotations

from remoting.build_proto import PB_DIR, generate


def test_committed_stubs_match_the_proto_sources(tmp_path):
    fresh = {p.name: p.read_text() for p in generate(tmp_path)}
    committed = {p.name: p.read_text() for p in PB_DIR.glob("*_pb2*.py")}
    assert fresh.keys() == committed.keys()
    stale = sorted(name for name in fresh if fresh[name] != committed[name])
    assert not stale, f"stale stubs {stale}: run `make proto` and commit remoting/pb"
