"""Which configuration a record ran, named by its numeric definition, and on which host.

A record's ``dtype`` entry says what it computed (``core.dtypes.definition_of``; new records
carry its ``definition_hash``). The analysis names each run by that definition
(``identify``):

- the recorded name, when the registry's configuration of that name has this definition;
- else the registry's name for this definition (the recorded name is kept in
  ``config_recorded``: an old ``fp16_naive`` run with fp16 Adam moments is ``fp16_fp16_states``);
- else ``<recorded name>@<6 hex of the definition>`` where the recorded name is a registry name
  whose meaning has changed since the run (a *legacy* definition: reported, never a pick, since
  no user can select it by name);
- a name the registry does not know is kept, and one analysis refuses to merge two runs that
  share such a name but not a definition (``ConfigIdentityError`` names them).

A record whose ``dtype`` entry carries no numeric field is taken at its name's registry
definition. Two configurations may also be identical by construction for speed and memory
only (Adam's eps, the static loss scale's value, an FP8 configuration whose record says no
Linear layer was converted: ``core.dtypes.cost_definition``): ``cost_hash`` says so, and the
flips and picks count them once.
"""
from __future__ import annotations

import dataclasses

from benchlib.core.dtypes import ALIASES, REGISTRY, DtypeConfig, cost_definition, definition_of, hash_definition

HOST_KEYS = ("host_id", "boot_id", "gpu_uuid")
"""``env`` keys that identify the machine a run was measured on, whichever a record carries.
``hostname`` is not one: every lent GPU host is called ``vm``."""
LEGACY = "legacy"
"""The role of a definition the registry no longer has."""
_NUMERIC = {f.name for f in dataclasses.fields(DtypeConfig)} - {"name", "description", "role"}
_BY_HASH = {c.definition_hash: c.name for c in REGISTRY.values()}


class ConfigIdentityError(ValueError):
    """Runs that share a configuration name but not its numeric definition."""


def definition_hash(dtype: dict) -> str | None:
    """The record's definition hash (recorded, else computed from its fields); None where its
    ``dtype`` entry has no numeric field and its name is not in the registry."""
    full = dtype if dtype.get("definition_hash") else _full(dtype)
    if full.get("definition_hash"):
        return str(full["definition_hash"])
    return hash_definition(definition_of(full)) if _NUMERIC & set(full) else None


def _full(dtype: dict) -> dict:
    """The record's dtype entry, or its registry entry where it names no numeric field."""
    if _NUMERIC & set(dtype):
        return dtype
    name = ALIASES.get(dtype.get("name", ""), dtype.get("name", ""))
    return REGISTRY[name].to_dict() if name in REGISTRY else dtype


def fp8_converted(rec: dict) -> bool | None:
    """Whether the run converted any Linear layer to float8 (its ``model.matmuls``); None where
    the record does not say."""
    mm = (rec.get("model") or {}).get("matmuls")
    return any(bool(m.get("fp8")) for m in mm) if isinstance(mm, list) and mm else None


def identify(rec: dict) -> dict:
    """``config`` (the analysis' name, see the module docstring), ``config_recorded``,
    ``definition_hash``, ``cost_hash`` and ``role`` of one record."""
    recorded = ALIASES.get(rec["config"], rec["config"])
    dtype = {**(rec.get("dtype") or {}), "name": recorded}
    h = definition_hash(dtype)
    full = _full(dtype)
    fp8 = fp8_converted(rec) if full.get("fp8", "none") != "none" else None
    cost = hash_definition(cost_definition(full, fp8)) if _NUMERIC & set(full) else h
    if recorded in REGISTRY and (h is None or REGISTRY[recorded].definition_hash == h):
        name = recorded
    elif h in _BY_HASH:
        name = _BY_HASH[h]
    elif recorded in REGISTRY:
        name = f"{recorded}@{h[:6]}"
    else:
        name = recorded
    if name in REGISTRY:
        role = REGISTRY[name].role
    else:
        role = LEGACY if "@" in name else str((rec.get("dtype") or {}).get("role") or "candidate")
    return {"config": name, "config_recorded": rec["config"], "definition_hash": h, "cost_hash": cost, "role": role}


def identities(records: list[dict]) -> list[dict]:
    """``identify`` for every record; raises ``ConfigIdentityError`` (one line naming the runs)
    where runs share a name but not a definition."""
    ids = [identify(r) for r in records]
    seen: dict[str, dict] = {}
    for r, i in zip(records, ids):
        seen.setdefault(i["config"], {}).setdefault(i["definition_hash"], []).append(r["run_id"])
    for name, defs in seen.items():
        if len(defs) > 1:
            runs = "; ".join(f"{', '.join(sorted(ids_)[:3])}{' ...' if len(ids_) > 3 else ''} (definition {h})"
                             for h, ids_ in sorted(defs.items(), key=lambda x: str(x[0])))
            raise ConfigIdentityError(f"runs share the config name {name!r} but not its definition, refusing to "
                                      f"merge them: {runs}; give the configurations different names or analyse "
                                      f"them apart")
    return ids


def host_of(env: dict) -> str | None:
    """The host identity of a run's ``env`` (``HOST_KEYS`` present, joined); None = unknown."""
    parts = [f"{k}={env[k]}" for k in HOST_KEYS if env.get(k)]
    return ";".join(parts) or None
