"""ACL 2.0's decision against a model written independently (string prefixes, integer IP masks): deny wins, prefix
patterns, source ranges, Super users, and a code nobody mapped."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.auth.actions import needs
from broker.auth.model import (
    Acl,
    Action,
    AuthError,
    Decision,
    Entry,
    Resource,
    ResourceType,
    User,
    UserType,
    decide,
    parse_network,
)
from remoting.codes import RequestCode
from remoting.frame_codec import RemotingCommand

NAMES = st.text(alphabet="ab", min_size=1, max_size=4)
NETS = ["10.0.0.0/8", "10.1.0.0/16", "192.168.1.0/24", "192.168.1.7/32"]
IPS = ["10.1.2.3", "10.2.0.1", "192.168.1.7", "192.168.1.8", "172.16.0.1"]
ACTIONS = [a for a in Action]


def _ip_int(text: str) -> int:
    a, b, c, d = (int(x) for x in text.split("."))
    return (a << 24) | (b << 16) | (c << 8) | d


def _in_net(ip: str, net: str) -> bool:
    base, bits = net.split("/")
    shift = 32 - int(bits)
    return _ip_int(ip) >> shift == _ip_int(base) >> shift


@st.composite
def entries(draw):
    kind = draw(st.sampled_from(["Topic", "Group", "*"]))
    if kind == "*":
        pattern = "*"
    else:
        pattern = f"{kind}:{draw(NAMES)}{draw(st.sampled_from(['', '*']))}"
    return {
        "resource": pattern,
        "actions": [a.value for a in draw(st.lists(st.sampled_from(ACTIONS), min_size=1, max_size=3))],
        "sourceIps": draw(st.lists(st.sampled_from(NETS), max_size=2)),
        "decision": draw(st.sampled_from(["Allow", "Deny"])),
    }


def _model_matches(entry: dict, kind: str, name: str, actions: set[str], ip: str) -> bool:
    pattern = entry["resource"]
    if pattern != "*":
        pkind, pname = pattern.split(":", 1)
        if pkind != kind:
            return False
        if pname.endswith("*"):
            if name[: len(pname) - 1] != pname[:-1]:
                return False
        elif pname != name:
            return False
    if not ({"All", "Any"} & set(entry["actions"]) or actions & set(entry["actions"])):
        return False
    return not entry["sourceIps"] or any(_in_net(ip, n) for n in entry["sourceIps"])


def _model_allows(raw: list[dict], kind: str, name: str, actions: set[str], ip: str) -> bool:
    hits = [e["decision"] for e in raw if _model_matches(e, kind, name, actions, ip)]
    return bool(hits) and "Deny" not in hits


@settings(max_examples=600, deadline=None)
@given(
    raw=st.lists(entries(), max_size=5),
    kind=st.sampled_from(["Topic", "Group"]),
    name=NAMES,
    actions=st.sets(st.sampled_from(["Pub", "Sub", "Create", "Update", "Delete", "Get", "List"]), min_size=1),
    ip=st.sampled_from(IPS),
)
def test_decision_matches_the_model(raw, kind, name, actions, ip):
    acl = Acl.from_json({"subject": "User:u", "policies": [{"policyType": "Custom", "entries": raw}]})
    need = (Resource(ResourceType(kind), name), frozenset(Action(a) for a in actions))
    granted = decide(acl.entries, [need], ip) is None
    assert granted == _model_allows(raw, kind, name, set(actions), ip)


@settings(max_examples=200, deadline=None)
@given(raw=st.lists(entries(), max_size=4), name=NAMES)
def test_adding_a_matching_deny_always_refuses(raw, name):
    deny = {"resource": f"Topic:{name}", "actions": ["Pub"], "decision": "Deny"}
    acl = Acl.from_json({"subject": "User:u", "policies": [{"entries": raw + [deny]}]})
    assert decide(acl.entries, [(Resource(ResourceType.TOPIC, name), frozenset({Action.PUB}))], "10.1.2.3")


def test_every_need_must_be_granted_and_unmapped_codes_are_refused():
    acl = Acl.from_json({"subject": "User:u", "policies": [{"entries": [
        {"resource": "Topic:orders", "actions": ["Sub"], "decision": "Allow"}]}]})
    pull = RemotingCommand(RequestCode.PULL_MESSAGE, ext={"topic": "orders", "consumerGroup": "g"})
    assert decide(acl.entries, needs(pull), "10.0.0.1") == (Resource(ResourceType.GROUP, "g"), frozenset({Action.SUB}))
    assert decide(acl.entries, needs(RemotingCommand(9999)), "10.0.0.1") is not None
    assert decide(acl.entries, [], "10.0.0.1") is None  # a producer's heartbeat needs nothing


def test_the_table_follows_rocketmqs_rules():
    send = RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext={"a": "pg", "b": "orders"})
    assert needs(send) == [(Resource(ResourceType.TOPIC, "orders"), frozenset({Action.PUB}))]
    back = RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext={"a": "cg", "b": "%RETRY%cg"})
    assert needs(back) == [(Resource(ResourceType.GROUP, "cg"), frozenset({Action.SUB}))]
    retry_route = RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext={"topic": "%RETRY%cg"})
    assert needs(retry_route) == [(Resource(ResourceType.GROUP, "cg"),  # Resource.ofGroup drops the prefix
                                   frozenset({Action.PUB, Action.SUB, Action.GET}))]
    commit = RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, ext={"topic": "t", "consumerGroup": "g"})
    assert (Resource(ResourceType.GROUP, "g"), frozenset({Action.SUB, Action.UPDATE})) in needs(commit)
    create = RemotingCommand(RequestCode.UPDATE_AND_CREATE_TOPIC, ext={"topic": "t"})
    assert needs(create) == [(Resource(ResourceType.TOPIC, "t"), frozenset({Action.CREATE, Action.UPDATE}))]
    beat = RemotingCommand(RequestCode.HEART_BEAT, body=b'{"clientID":"c","producerDataSet":[{"groupName":"p"}],'
                           b'"consumerDataSet":[{"groupName":"g","subscriptionDataSet":[{"topic":"t"},'
                           b'{"topic":"%RETRY%g"}]}]}')
    assert needs(beat) == [(Resource(ResourceType.GROUP, "g"), frozenset({Action.SUB})),
                           (Resource(ResourceType.TOPIC, "t"), frozenset({Action.SUB}))]


def test_namespace_and_cluster_patterns():
    ns = Entry.from_json({"resource": "Namespace:prod", "actions": ["All"], "decision": "Allow"})
    assert ns.matches(Resource(ResourceType.TOPIC, "prod%orders"), frozenset({Action.PUB}), None)
    assert not ns.matches(Resource(ResourceType.TOPIC, "orders"), frozenset({Action.PUB}), None)
    cluster = Entry.from_json({"resource": "Cluster:DefaultCluster", "actions": ["Get"], "decision": "Allow"})
    assert cluster.matches(Resource(ResourceType.CLUSTER), frozenset({Action.GET}), None)
    assert not cluster.matches(Resource(ResourceType.CLUSTER), frozenset({Action.UPDATE}), None)


def test_bad_input_is_refused_with_what_to_fix():
    with pytest.raises(AuthError, match="action"):
        Entry.from_json({"resource": "Topic:t", "actions": ["Fly"]})
    with pytest.raises(AuthError, match="CIDR"):
        parse_network("10.0.0.300/8")
    with pytest.raises(AuthError, match="subject"):
        Acl.from_json({"subject": "t", "policies": []})
    with pytest.raises(AuthError, match="password"):
        User.from_json({"username": "u"})
    with pytest.raises(AuthError, match="printable ASCII"):
        User.from_json({"username": "ü", "password": "x"})


def test_user_json_never_carries_the_password_unless_asked():
    user = User.from_json({"username": "u", "password": "s3cret", "userType": "Super"})
    assert user.user_type is UserType.SUPER and "s3cret" not in repr(user)
    assert "password" not in user.to_json(with_password=False)
    assert Decision.DENY.value == "Deny"


def test_auth_json_keys_are_checked_at_load_without_quoting_them(tmp_path):
    from broker.config import load_broker_settings
    from common.errors import ConfigError

    path = tmp_path / "broker.conf"
    path.write_text('initAuthenticationUser={"username":"admin","password":"hunter2-not-json\n')
    with pytest.raises(ConfigError) as err:
        load_broker_settings(path, environ={})
    assert "initAuthenticationUser" in str(err.value) and "hunter2" not in str(err.value)
    path.write_text('authenticationEnabled=true\ninitAuthenticationUser={"username":"admin","password":"pw-77"}\n'
                    'innerClientAuthenticationCredentials={"accessKey":"inner","secretKey":"sk-88"}\n')
    settings = load_broker_settings(path, environ={})
    assert settings.auth.init_user() == ("admin", "pw-77")
    assert settings.auth.inner_credentials().access_key == "inner" and "sk-88" not in repr(settings)


async def test_a_change_that_cannot_be_written_is_not_applied(tmp_path):
    from broker.auth.store import AuthStore

    blocker = tmp_path / "file"
    blocker.write_text("x")
    store = AuthStore(blocker / "auth.json")  # its directory is a file: every write fails
    version = store.version

    def add() -> None:
        store.users["u"] = User("u", "pw")

    with pytest.raises(OSError):
        await store.change(add)
    assert store.users == {} and store.version != version  # and cached decisions are dropped
    ok = AuthStore(tmp_path / "cfg" / "auth.json")
    await ok.change(lambda: ok.users.__setitem__("u", User("u", "pw")))
    again = AuthStore(tmp_path / "cfg" / "auth.json")
    again.load()
    assert again.users["u"].password == "pw"
