"""The broker's controller-assigned id, kept in ``<storePathRootDir>/brokerIdentity`` (RocketMQ 5's BrokerMetadata).

Joining is three steps: GET_NEXT_BROKER_ID, then ``brokerIdentity-temp`` is written with that id and this broker's
registerCheckCode (``address;nanoseconds``), then APPLY_BROKER_ID, then ``brokerIdentity`` replaces the temp file.
A broker that crashed between the steps finds the temp file and applies again with the same code, which the
controller accepts (the id is already its own); a lost race for an id (another broker applied first) starts over.
``obtain`` runs the steps against the controller; the rest of this module is the files.
Files are ``key=value`` lines: clusterName, brokerName, brokerId (and registerCheckCode in the temp file).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from common.errors import PyrmqError
from common.persist import write_bytes_atomic
from controller.client import ControllerClient, ControllerError
from remoting.codes import ResponseCode

FILE = "brokerIdentity"
TEMP = "brokerIdentity-temp"
MAX_APPLY_ATTEMPTS = 20  # lost races for an id before the broker gives up


class IdentityError(PyrmqError):
    """The identity file belongs to another group or does not parse."""


def _read(path: Path) -> dict[str, str] | None:
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return None
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _write(path: Path, values: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, "".join(f"{k}={v}\n" for k, v in values.items()).encode("utf-8"))


def _check(values: dict[str, str], path: Path, cluster: str, broker_name: str) -> int:
    if values.get("clusterName") != cluster or values.get("brokerName") != broker_name:
        raise IdentityError(f"{path} belongs to {values.get('clusterName')}/{values.get('brokerName')}, not "
                            f"{cluster}/{broker_name}", hint="give this broker its own storePathRootDir")
    raw = values.get("brokerId", "")
    if not raw.isascii() or not raw.isdigit() or int(raw) < 1:
        raise IdentityError(f"{path}: brokerId {raw!r} is not an id >= 1", hint="remove the file to apply again")
    return int(raw)


def load(root: Path, cluster: str, broker_name: str) -> int | None:
    """The persisted id, or None when this broker has none yet."""
    path = Path(root) / FILE
    values = _read(path)
    return None if values is None else _check(values, path, cluster, broker_name)


def load_pending(root: Path, cluster: str, broker_name: str) -> tuple[int, str] | None:
    """(id, registerCheckCode) of an application that may not have completed."""
    path = Path(root) / TEMP
    values = _read(path)
    if values is None:
        return None
    return _check(values, path, cluster, broker_name), values.get("registerCheckCode", "")


def save_pending(root: Path, cluster: str, broker_name: str, broker_id: int, check_code: str) -> None:
    _write(Path(root) / TEMP, {"clusterName": cluster, "brokerName": broker_name, "brokerId": str(broker_id),
                               "registerCheckCode": check_code})


def commit(root: Path, cluster: str, broker_name: str, broker_id: int) -> None:
    _write(Path(root) / FILE, {"clusterName": cluster, "brokerName": broker_name, "brokerId": str(broker_id)})
    try:
        os.unlink(Path(root) / TEMP)
    except FileNotFoundError:
        pass


async def obtain(controller: ControllerClient, root: Path, cluster: str, broker_name: str, address: str) -> int:
    """This broker's id: the one on disk, else the three steps above with ``controller`` (crash-safe at each)."""
    known = load(root, cluster, broker_name)
    if known is not None:
        return known
    pending = load_pending(root, cluster, broker_name)
    for _ in range(MAX_APPLY_ATTEMPTS):
        if pending is None:
            broker_id = await controller.next_broker_id(cluster, broker_name)
            check = f"{address};{time.time_ns()}"
            save_pending(root, cluster, broker_name, broker_id, check)
            pending = (broker_id, check)
        try:
            await controller.apply_broker_id(cluster, broker_name, *pending)
        except ControllerError as exc:
            if exc.code != ResponseCode.CONTROLLER_BROKER_ID_INVALID:
                raise
            pending = None  # another broker took that id first: ask again
            continue
        commit(root, cluster, broker_name, pending[0])
        return pending[0]
    raise PyrmqError(f"controller mode: could not obtain a brokerId in {MAX_APPLY_ATTEMPTS} attempts")
