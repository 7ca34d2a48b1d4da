"""SubscriptionGroupManager: per-group consume settings (spec §5.3), persisted to ``config/subscriptionGroup.json``.

Every change, auto-creation included, bumps the DataVersion (RocketMQ does the same, which is why a slave's
auto-created groups are replaced by the master's table at the next sync). Update replaces the whole config:
fields a caller leaves out take the config's defaults (remoting/subscription_group.py). File format::

    {"dataVersion": {...}, "subscriptionGroupTable": {"G": {"groupName": "G", "consumeEnable": true, ...}}}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from broker.metadata.config_file import ConfigFile
from remoting.data_version import DataVersion
from remoting.subscription_group import SubscriptionGroupConfig

__all__ = ["SubscriptionGroupConfig", "SubscriptionGroupManager"]  # the config's home is remoting/


class SubscriptionGroupManager(ConfigFile):
    def __init__(self, config_dir: str | Path, *, auto_create: bool = True) -> None:
        super().__init__(Path(config_dir) / "subscriptionGroup.json")
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion()
        self.auto_create = auto_create

    def to_json(self) -> Any:
        return {
            "dataVersion": self.data_version.to_json(),
            "subscriptionGroupTable": {name: cfg.to_json() for name, cfg in self.table.items()},
        }

    def load_json(self, obj: Any) -> None:
        self.data_version = DataVersion.from_json(obj.get("dataVersion"))
        self.table = {
            name: SubscriptionGroupConfig.from_json(cfg, name)
            for name, cfg in (obj.get("subscriptionGroupTable") or {}).items()
        }

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self.table.get(group)

    def find_or_create(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; auto-created with the defaults when allowed, else None."""
        cfg = self.table.get(group)
        if cfg is None and self.auto_create:
            cfg = self.update(SubscriptionGroupConfig(group))
        return cfg

    def update(self, cfg: SubscriptionGroupConfig) -> SubscriptionGroupConfig:
        self.table[cfg.group_name] = cfg
        self.data_version.next_version()
        self.mark_dirty()
        return cfg

    def delete(self, group: str) -> bool:
        if self.table.pop(group, None) is None:
            return False
        self.data_version.next_version()
        self.mark_dirty()
        return True

    def snapshot(self) -> tuple[list[SubscriptionGroupConfig], DataVersion]:
        return list(self.table.values()), self.data_version.copy()

    def replace_all(self, groups: list[SubscriptionGroupConfig], data_version: DataVersion) -> bool:
        if data_version == self.data_version:
            return False
        self.table = {g.group_name: g for g in groups}
        self.data_version = data_version.copy()
        self.mark_dirty()
        return True
