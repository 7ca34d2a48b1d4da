"""SubscriptionGroupManager: per-group consume settings (spec §5.3), persisted to ``config/subscriptionGroup.json``.

Every change, auto-creation included, bumps the DataVersion (RocketMQ does the same, which is why a slave's
auto-created groups are replaced by the master's table at the next sync). Update replaces the whole config:
fields a caller leaves out take the config's defaults (remoting/subscription_group.py). File format::

    {"dataVersion": {...}, "subscriptionGroupTable": {"G": {"groupName": "G", "consumeEnable": true, ...}},
     "autoCreatedGroups": ["G"]}

``autoCreateSubscriptionGroup`` (RocketMQ's default, true) lets any pull, heartbeat or send-back name a new group,
so at most ``maxAutoCreatedSubscriptionGroups`` groups are created that way; beyond it a new name is refused (the
caller answers SUBSCRIPTION_GROUP_NOT_EXIST with ``refusal_remark``) until an operator creates the group with
updateSubGroup (which also turns an auto-created group into an explicit one), deletes unused ones or raises the
key. ``autoCreatedGroups`` (pyrmq's key; RocketMQ ignores unknown keys) keeps the count across restarts. A slave's
own auto-created groups last until the next sync replaces its table, so they are counted from there.
Persistence is batched (``config_file``): auto-created groups may be lost by a crash within the interval and are
created again by the client's next request; updateSubGroup / deleteSubGroup wait for the write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from broker.metadata.config_file import ConfigFile
from common.persist import Render
from remoting.data_version import DataVersion
from remoting.subscription_group import SubscriptionGroupConfig

__all__ = ["SubscriptionGroupConfig", "SubscriptionGroupManager"]  # the config's home is remoting/

DEFAULT_MAX_AUTO_CREATED_GROUPS = 10_000


class SubscriptionGroupManager(ConfigFile):
    def __init__(
        self,
        config_dir: str | Path,
        *,
        auto_create: bool = True,
        max_auto_created: int = DEFAULT_MAX_AUTO_CREATED_GROUPS,
        persist_interval_s: float = 0.0,
    ) -> None:
        super().__init__(Path(config_dir) / "subscriptionGroup.json", persist_interval_s=persist_interval_s)
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion()
        self.auto_create = auto_create
        self.max_auto_created = max_auto_created
        self.auto_created: set[str] = set()
        self.auto_create_refusals = 0

    def to_json(self) -> Any:
        return {
            "dataVersion": self.data_version.to_json(),
            "subscriptionGroupTable": {name: cfg.to_json() for name, cfg in self.table.items()},
        }

    def file_snapshot(self) -> Render:
        table, version, auto = dict(self.table), self.data_version.copy(), list(self.auto_created)
        return lambda: {
            "dataVersion": version.to_json(),
            "subscriptionGroupTable": {name: cfg.to_json() for name, cfg in table.items()},
            "autoCreatedGroups": sorted(auto),
        }

    def load_json(self, obj: Any) -> None:
        self.data_version = DataVersion.from_json(obj.get("dataVersion"))
        self.table = {
            name: SubscriptionGroupConfig.from_json(cfg, name)
            for name, cfg in (obj.get("subscriptionGroupTable") or {}).items()
        }
        auto = obj.get("autoCreatedGroups")
        self.auto_created = {n for n in auto if n in self.table} if isinstance(auto, list) else set()

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self.table.get(group)

    def find_or_create(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; auto-created with the defaults when allowed and under the limit, else None
        (``refusal_remark`` says why)."""
        cfg = self.table.get(group)
        if cfg is not None or not self.auto_create:
            return cfg
        if len(self.auto_created) >= self.max_auto_created:
            self.auto_create_refusals += 1
            return None
        return self.update(SubscriptionGroupConfig(group), auto=True)

    def refusal_remark(self, group: str, broker_name: str) -> str:
        """Why ``find_or_create(group)`` gave None, and what to do."""
        missing = f"subscription group {group} does not exist on broker {broker_name} and"
        if not self.auto_create:
            return f"{missing} autoCreateSubscriptionGroup=false; create it (mqctl updateSubGroup -g {group})"
        return (
            f"{missing} {len(self.auto_created)} groups were auto-created already, the limit"
            f" maxAutoCreatedSubscriptionGroups={self.max_auto_created}; create it (mqctl updateSubGroup -g {group}),"
            " delete unused groups (mqctl deleteSubGroup) or raise maxAutoCreatedSubscriptionGroups in the broker's"
            " conf"
        )

    def update(self, cfg: SubscriptionGroupConfig, *, auto: bool = False) -> SubscriptionGroupConfig:
        """Create or replace; an explicit update (``auto`` false) makes the group an operator's one."""
        self.table[cfg.group_name] = cfg
        if auto:
            self.auto_created.add(cfg.group_name)
        else:
            self.auto_created.discard(cfg.group_name)
        self.data_version.next_version()
        self.mark_dirty()
        return cfg

    def delete(self, group: str) -> bool:
        if self.table.pop(group, None) is None:
            return False
        self.auto_created.discard(group)
        self.data_version.next_version()
        self.mark_dirty()
        return True

    def snapshot(self) -> tuple[list[SubscriptionGroupConfig], DataVersion]:
        return list(self.table.values()), self.data_version.copy()

    def replace_all(self, groups: list[SubscriptionGroupConfig], data_version: DataVersion) -> bool:
        if data_version == self.data_version:
            return False
        self.table = {g.group_name: g for g in groups}
        self.auto_created = set()  # the master's groups count on the master; ours are gone
        self.data_version = data_version.copy()
        self.mark_dirty()
        return True
