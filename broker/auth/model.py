"""ACL 2.0's model (spec controller-and-features.md §2.3) and its decision. Pure.

A user is ``Super`` (may do anything) or ``Normal`` (may do what its policy allows). A policy is a list of entries,
each a resource pattern, the actions it covers, a decision and optional source IP ranges. A request needs one or
more (resource, actions) pairs (``broker.auth.actions``); a pair is granted when an entry matching the resource,
one of the actions and the source address allows it and no matching entry denies it (deny wins). Nothing matching
means denied: a Normal user may do only what a policy grants.

Resource patterns, as RocketMQ writes them: ``Cluster`` (or ``Cluster:<name>``), ``Namespace:<ns>``,
``Topic:<name>``, ``Topic:<prefix>*``, ``Group:<name>``, ``Group:<prefix>*``, ``Topic:*``, and ``*`` or ``Any``.
A ``Namespace:<ns>`` pattern also covers topics and groups named ``<ns>%...`` (RocketMQ's namespaced names).
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass, field

MAX_NAME = 255  # RocketMQ's topic/group name limits are lower; a longer username or pattern is refused


class AuthError(ValueError):
    """A user or policy that cannot be stored; the message says what to fix."""


class UserType(enum.Enum):
    SUPER = "Super"
    NORMAL = "Normal"


class UserStatus(enum.Enum):
    ENABLE = "enable"
    DISABLE = "disable"


class ResourceType(enum.Enum):
    ANY = "Any"
    CLUSTER = "Cluster"
    NAMESPACE = "Namespace"
    TOPIC = "Topic"
    GROUP = "Group"


class Action(enum.Enum):
    ALL = "All"
    ANY = "Any"
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"


class Decision(enum.Enum):
    ALLOW = "Allow"
    DENY = "Deny"


def _by_name(enum_cls: type[enum.Enum], text: object, what: str) -> enum.Enum:
    if isinstance(text, str):
        for member in enum_cls:
            if member.value.lower() == text.strip().lower() or member.name.lower() == text.strip().lower():
                return member
    names = ", ".join(m.value for m in enum_cls)
    raise AuthError(f"{what} {str(text)[:40]!r} is not one of {names}")


@dataclass(frozen=True)
class User:
    username: str
    password: str = field(repr=False)
    user_type: UserType = UserType.NORMAL
    status: UserStatus = UserStatus.ENABLE

    @property
    def enabled(self) -> bool:
        return self.status is UserStatus.ENABLE

    @classmethod
    def from_json(cls, data: object) -> User:
        """From RocketMQ's UserInfo (``username``, ``password``, ``userType``, ``userStatus``)."""
        if not isinstance(data, dict):
            raise AuthError("a user is a JSON object with username and password")
        name = data.get("username")
        password = data.get("password")
        check_name(name, "username")
        if not isinstance(password, str) or not password:
            raise AuthError(f"user {name}: password is missing")
        user_type = _by_name(UserType, data.get("userType") or "Normal", "userType")
        status = _by_name(UserStatus, data.get("userStatus") or "enable", "userStatus")
        return cls(name, password, user_type, status)  # type: ignore[arg-type]

    def to_json(self, *, with_password: bool) -> dict:
        out = {"username": self.username, "userType": self.user_type.value, "userStatus": self.status.value}
        if with_password:
            out["password"] = self.password
        return out


def check_name(name: object, what: str) -> None:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME or not name.isascii() or not name.isprintable():
        raise AuthError(f"{what} must be 1 to {MAX_NAME} printable ASCII characters")


@dataclass(frozen=True)
class Resource:
    """A resource a request needs (``name`` literal) or a pattern in a policy (``prefix`` when it ends in ``*``)."""

    type: ResourceType
    name: str = ""
    prefix: bool = False

    @classmethod
    def parse(cls, text: object) -> Resource:
        if not isinstance(text, str) or not text.strip():
            raise AuthError("a resource is a string such as Topic:orders, Group:g*, Cluster or *")
        text = text.strip()
        if text in ("*", "Any"):
            return cls(ResourceType.ANY, "", True)
        kind, _, name = text.partition(":")
        rtype = _by_name(ResourceType, kind, "resource type")
        if rtype is ResourceType.CLUSTER:
            return cls(rtype, "", True)  # one cluster per authConfig: any cluster name means this one
        if not name:
            raise AuthError(f"resource {text[:40]!r} needs a name after the colon (or * for all)")
        check_name(name, "resource name")
        if name.endswith("*"):
            return cls(rtype, name[:-1], True)
        return cls(rtype, name, False)

    def __str__(self) -> str:
        if self.type is ResourceType.ANY:
            return "*"
        if self.type is ResourceType.CLUSTER:
            return "Cluster"
        return f"{self.type.value}:{self.name}{'*' if self.prefix else ''}"

    def covers(self, wanted: Resource) -> bool:
        """Whether this policy pattern covers the literal resource ``wanted``."""
        if self.type is ResourceType.ANY:
            return True
        if self.type is ResourceType.NAMESPACE and wanted.type in (ResourceType.TOPIC, ResourceType.GROUP):
            return self._name_matches(wanted.name.split("%", 1)[0]) if "%" in wanted.name else False
        if self.type is not wanted.type:
            return False
        if self.type is ResourceType.CLUSTER:
            return True
        return self._name_matches(wanted.name)

    def _name_matches(self, name: str) -> bool:
        return name.startswith(self.name) if self.prefix else name == self.name


@dataclass(frozen=True)
class Entry:
    resource: Resource
    actions: frozenset[Action]
    decision: Decision = Decision.ALLOW
    source_ips: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def from_json(cls, data: object) -> Entry:
        """From RocketMQ's PolicyEntryInfo (``resource``, ``actions``, ``sourceIps``, ``decision``)."""
        if not isinstance(data, dict):
            raise AuthError("a policy entry is a JSON object with resource, actions and decision")
        actions = data.get("actions")
        if isinstance(actions, str):
            actions = [a for a in actions.split(",") if a.strip()]
        if not isinstance(actions, list) or not actions:
            raise AuthError("a policy entry needs actions (Pub, Sub, Create, Update, Delete, Get, List, All, Any)")
        ips = data.get("sourceIps") or []
        if isinstance(ips, str):
            ips = [i for i in ips.split(",") if i.strip()]
        if not isinstance(ips, list):
            raise AuthError("sourceIps is a list of addresses or CIDR ranges")
        return cls(
            Resource.parse(data.get("resource")),
            frozenset(_by_name(Action, a, "action") for a in actions),  # type: ignore[misc]
            _by_name(Decision, data.get("decision") or "Allow", "decision"),  # type: ignore[arg-type]
            tuple(parse_network(i) for i in ips),
        )

    def to_json(self) -> dict:
        return {
            "resource": str(self.resource),
            "actions": sorted(a.value for a in self.actions),
            "sourceIps": [str(n) for n in self.source_ips],
            "decision": self.decision.value,
        }

    def matches(self, wanted: Resource, actions: frozenset[Action], source_ip: str | None) -> bool:
        if not self.resource.covers(wanted):
            return False
        if not (Action.ALL in self.actions or Action.ANY in self.actions or self.actions & actions):
            return False
        if self.source_ips:
            addr = parse_address(source_ip)
            if addr is None or not any(addr.version == net.version and addr in net for net in self.source_ips):
                return False
        return True


def parse_network(text: object) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(str(text).strip(), strict=False)
    except ValueError:
        raise AuthError(f"source IP {str(text)[:45]!r} is not an address or CIDR range (10.0.0.0/8)") from None


def parse_address(text: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if not text:
        return None
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


@dataclass(frozen=True)
class Acl:
    """One subject's policy (RocketMQ's AclInfo: ``subject`` ``User:<name>``, ``policies[].entries``)."""

    username: str
    entries: tuple[Entry, ...]

    @property
    def subject(self) -> str:
        return f"User:{self.username}"

    @classmethod
    def from_json(cls, data: object) -> Acl:
        if not isinstance(data, dict):
            raise AuthError("an ACL is a JSON object with subject and policies")
        subject = data.get("subject")
        if not isinstance(subject, str) or not subject.startswith("User:"):
            raise AuthError("an ACL's subject is User:<username>")
        username = subject[len("User:"):]
        check_name(username, "username")
        entries: list[Entry] = []
        policies = data.get("policies") or []
        if not isinstance(policies, list):
            raise AuthError("policies is a list of {policyType, entries}")
        for policy in policies:
            if not isinstance(policy, dict) or not isinstance(policy.get("entries") or [], list):
                raise AuthError("a policy is {policyType, entries: [...]}")
            entries += [Entry.from_json(e) for e in policy.get("entries") or []]
        return cls(username, tuple(entries))

    def to_json(self) -> dict:
        return {"subject": self.subject,
                "policies": [{"policyType": "Custom", "entries": [e.to_json() for e in self.entries]}]}


Need = tuple[Resource, frozenset[Action]]


def decide(entries: tuple[Entry, ...] | list[Entry], needs: list[Need] | None, source_ip: str | None) -> Need | None:
    """The first need the entries do not grant (None: all granted). ``needs=None`` (a request code nobody mapped)
    is never granted: such requests are for Super users only. An empty list needs nothing."""
    if needs is None:
        return (Resource(ResourceType.ANY), frozenset())
    for need in needs:
        wanted, actions = need
        allowed = False
        for entry in entries:
            if entry.matches(wanted, actions, source_ip):
                if entry.decision is Decision.DENY:
                    return need
                allowed = True
        if not allowed:
            return need
    return None
