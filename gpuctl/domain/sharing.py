"""Shared GPUs: MIG profiles per GPU model, how a node shares its GPUs, and what a slice costs.

Pure: reads plain Node dicts and strings, no I/O. docs/sharing.md explains the rules for users.

- **MIG** (A100, H100, H200): a GPU is cut into hardware-isolated instances of fixed profiles
  (`<compute slices>g.<memory>gb`, 7 compute and 8 memory slices per GPU; NVIDIA's mig-parted
  config-default.yaml and the MIG user guide's supported-profiles table). The device plugin's
  `mixed` strategy advertises each profile as its own resource `nvidia.com/mig-<profile>` (a `+`
  becomes `.`: `1g.10gb+me` -> `nvidia.com/mig-1g.10gb.me`); `single` advertises the slices as
  `nvidia.com/gpu` and suffixes the product label with `-MIG-<profile>`.
- **Time-slicing / MPS**: with `renameByDefault` the device plugin advertises `nvidia.com/gpu.shared`,
  `replicas` per GPU; GFD labels the node `nvidia.com/gpu.sharing-strategy=time-slicing|mps`,
  `nvidia.com/gpu.replicas` (replicas per GPU) and `nvidia.com/gpu.count` (physical GPUs).

**The one quota rule** (docs/sharing.md, "One budget"): a team's `gpu` quota is counted in units of
1/GPU_UNITS GPU. A whole GPU costs GPU_UNITS; a MIG instance costs the larger of its share of the
GPU's compute (g/7) and of its memory (memory slices/8), so every layout NVIDIA allows on one GPU costs
about one GPU (7 x 1g.10gb = 1, 4 x 1g.20gb = 1, 2 x 3g.40gb = 1, 3 x 2g.20gb = 6/7); a time-slicing
or MPS replica costs 1/SHARED_REPLICAS_CHARGED. GPU_UNITS = 840, the least common multiple of 1..8:
every one of these shares is a whole number of units, so Kueue (which rounds every resource but cpu
up to a whole unit per pod) charges them exactly and 7 x 1g.10gb fill a 1-GPU budget to the unit.
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Collection, Mapping
from fractions import Fraction
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

from gpuctl.constants import (
    GPU_RESOURCE,
    GPU_UNITS,
    LEGACY_QUOTA_GPU,
    MIG_RESOURCE_PREFIX,
    QUOTA_GPU,
    SHARED_GPU_RESOURCE,
    SHARED_REPLICAS_CHARGED,
    SHARED_SUFFIX,
    WHOLE_GPU_RESOURCES,
    Labels,
)
from gpuctl.quantity import QuantityError, parse_quantity

GIB = 1024**3
# GFD / device plugin node labels.
PRODUCT_LABEL = "nvidia.com/gpu.product"
MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB per GPU
COUNT_LABEL = "nvidia.com/gpu.count"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
SHARING_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
COMPUTE_SLICES = 7
MEMORY_SLICES = 8


class Mode(enum.StrEnum):
    """How a node (or a pool) shares its GPUs."""

    NONE = "none"
    MIG_MIXED = "mig-mixed"
    MIG_SINGLE = "mig-single"
    TIME_SLICING = "time-slicing"
    MPS = "mps"

    @property
    def is_mig(self) -> bool:
        return self in (Mode.MIG_MIXED, Mode.MIG_SINGLE)

    @property
    def isolated(self) -> bool:
        """Whether a slice's memory is its own: MIG in hardware, MPS by its control daemon's limit;
        time-slicing shares one GPU's memory and faults among every replica."""
        return self is not Mode.TIME_SLICING


class Profile(NamedTuple):
    """One MIG profile of one GPU model."""

    name: str  # as NVIDIA writes it: 1g.10gb, 1g.10gb+me
    compute: int  # compute slices of 7
    memory: int  # memory slices of 8
    per_gpu: int  # instances one GPU holds
    memory_gb: int

    @property
    def resource(self) -> str:
        """The device plugin's resource name under the mixed strategy."""
        return MIG_RESOURCE_PREFIX + self.name.replace("+", ".")

    @property
    def share(self) -> Fraction:
        """GPU equivalent: the larger of its share of compute and of memory."""
        return max(Fraction(self.compute, COMPUTE_SLICES), Fraction(self.memory, MEMORY_SLICES))

    @property
    def media(self) -> bool:
        return self.name.endswith("+me")


class Model(NamedTuple):
    """A MIG-capable GPU model."""

    name: str  # gpuctl's short name, shown in pool views
    memory_gb: int
    products: tuple[str, ...]  # substrings of nvidia.com/gpu.product that name it (upper case)
    profiles: tuple[Profile, ...]

    def profile(self, name: str) -> Profile | None:
        return next((p for p in self.profiles if p.name == name), None)


def _profiles(mem: tuple[int, int, int, int, int, int], *, media: bool = True) -> tuple[Profile, ...]:
    """The six MIG profiles every model has, from their memory sizes (1g/1 memory slice, 1g/2, 2g/2,
    3g/4, 4g/4, 7g/8), plus the 1g media-extension profile where NVIDIA lists one."""
    g1, g1x2, g2, g3, g4, g7 = mem
    out = [
        Profile(f"1g.{g1}gb", 1, 1, 7, g1),
        Profile(f"1g.{g1x2}gb", 1, 2, 4, g1x2),
        Profile(f"2g.{g2}gb", 2, 2, 3, g2),
        Profile(f"3g.{g3}gb", 3, 4, 2, g3),
        Profile(f"4g.{g4}gb", 4, 4, 1, g4),
        Profile(f"7g.{g7}gb", 7, 8, 1, g7),
    ]
    if media:
        out.insert(1, Profile(f"1g.{g1}gb+me", 1, 1, 1, g1))
    return tuple(out)


# NVIDIA mig-parted deployments/systemd/config-default.yaml; MIG user guide, supported profiles.
MODELS: tuple[Model, ...] = (
    Model(
        "A100-40GB", 40, ("A100-SXM4-40GB", "A100-PCIE-40GB", "A100 40GB"), _profiles((5, 10, 10, 20, 20, 40))
    ),
    Model(
        "A100-80GB",
        80,
        ("A100-SXM4-80GB", "A100-PCIE-80GB", "A100 80GB", "A100-80GB", "A100-80G"),
        _profiles((10, 20, 20, 40, 40, 80)),
    ),
    Model("H100-NVL", 94, ("H100 NVL", "H100-NVL"), _profiles((12, 24, 24, 47, 47, 94), media=False)),
    Model(
        "H100-80GB",
        80,
        ("H100-SXM5-80GB", "H100 80GB", "H100-80GB", "H100-PCIE-80GB", "H100-SXM"),
        _profiles((10, 20, 20, 40, 40, 80)),
    ),
    Model("H200-141GB", 141, ("H200",), _profiles((18, 35, 35, 71, 71, 141))),
)


def model_named(product: str | None) -> Model | None:
    """The MIG-capable model a product label (`NVIDIA-A100-SXM4-80GB`, `A100-80G`, a MIG single
    product `NVIDIA-A100-SXM4-80GB-MIG-1g.10gb`) names; None for any other GPU."""
    if not product:
        return None
    p = product.upper().replace("_", "-")
    for m in MODELS:
        # A product name starts a word: H200 is not GH200 (a Grace Hopper, whose profiles differ).
        if m.name.upper() == p or any(_starts_a_word(p, s.upper()) for s in m.products):
            return m
    return None


_WORD = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


def _starts_a_word(text: str, word: str) -> bool:
    """`word` occurs in `text` at its start or after a character other than A-Z, 0-9 (the regex
    `(^|[^A-Z0-9])word`, without compiling one pattern per product name: a read pays each compile)."""
    at = text.find(word)
    while at > 0 and text[at - 1] in _WORD:
        at = text.find(word, at + 1)
    return at >= 0


def model_by_memory(mib: int) -> Model | None:
    """The model whose memory (GFD's nvidia.com/gpu.memory, MiB) this is, when the product is unknown:
    only sizes no two models share (40 GB, 94 GB, 141 GB)."""
    gb = round(mib / 1024)
    found = [m for m in MODELS if abs(m.memory_gb - gb) <= 1]
    return found[0] if len(found) == 1 else None


def _all_profiles() -> dict[str, Profile]:
    """Profile name -> the profile, where a name appears on several models (only 1g.10gb: A100-40GB's
    1g/2-memory-slice profile and the 80 GB GPUs' smallest) the one with the smaller share: a quota
    resource is charged by name, Kueue does not know the node's model (docs/sharing.md)."""
    out: dict[str, Profile] = {}
    for m in MODELS:
        for p in m.profiles:
            if p.name not in out or p.share < out[p.name].share:
                out[p.name] = p
    return out


PROFILES: Mapping[str, Profile] = _all_profiles()


def profile_of_resource(resource: str) -> str | None:
    """`nvidia.com/mig-1g.10gb.me` -> `1g.10gb+me`; None for anything but a MIG resource."""
    if not resource.startswith(MIG_RESOURCE_PREFIX):
        return None
    rest = resource[len(MIG_RESOURCE_PREFIX) :]
    return rest[: -len(".me")] + "+me" if rest.endswith(".me") else rest


def mig_profile_of(resource: str) -> str | None:
    """The MIG profile a resource hands out an instance of, or a time-sliced replica of one
    (`nvidia.com/mig-1g.10gb.shared` -> `1g.10gb`); None for anything but a MIG resource."""
    if resource.startswith(MIG_RESOURCE_PREFIX) and resource.endswith(SHARED_SUFFIX):
        resource = resource[: -len(SHARED_SUFFIX)]
    return profile_of_resource(resource)


def resource_units(resource: str) -> int | None:
    """What one of `resource` costs of a team's GPU budget, in 1/GPU_UNITS GPU (the one rule, module
    docstring); None for a resource that is not a GPU or a slice of one. A time-sliced replica of a MIG
    instance (`nvidia.com/mig-1g.10gb.shared`) costs the instance's units / SHARED_REPLICAS_CHARGED,
    rounded up to a whole unit (1g.10gb 30; 1g.20gb's 52.5 is 53)."""
    if resource.startswith(MIG_RESOURCE_PREFIX) and resource.endswith(SHARED_SUFFIX):
        whole = resource_units(resource[: -len(SHARED_SUFFIX)])
        return None if whole is None else -(-whole // SHARED_REPLICAS_CHARGED)
    if resource in WHOLE_GPU_RESOURCES:
        return GPU_UNITS
    if resource == SHARED_GPU_RESOURCE:
        return GPU_UNITS // SHARED_REPLICAS_CHARGED
    prof = profile_of_resource(resource)
    if prof is None:
        return None
    known = PROFILES.get(prof)
    if known is not None:
        return int(known.share * GPU_UNITS)
    m = re.match(r"^([1-7])g\.", prof)  # a profile of a model not in the table: its compute share
    return GPU_UNITS * int(m.group(1)) // COMPUTE_SLICES if m else None


def quota_transformations() -> list[dict]:
    """Kueue's resources.transformations for manifests/kueue/configuration.yaml: every GPU resource
    charges its units of the team budget QUOTA_GPU (Retain: the pod still asks the scheduler for the
    slice). nvidia.com/gpu also still charges LEGACY_QUOTA_GPU, one per GPU, so a ClusterQueue written
    before the budget moved to QUOTA_GPU keeps bounding its team until gpuctl rewrites it (queues
    written since do not declare it and Kueue ignores it there). tests/unit/test_sharing.py checks the
    file says exactly this."""
    mig = sorted({p.resource for p in PROFILES.values()})
    names = [*WHOLE_GPU_RESOURCES, SHARED_GPU_RESOURCE, *mig, *(r + SHARED_SUFFIX for r in mig)]
    out = []
    for r in names:
        outputs = {QUOTA_GPU: str(resource_units(r))}
        if r == GPU_RESOURCE:
            outputs[LEGACY_QUOTA_GPU] = "1"
        out.append({"input": r, "strategy": "Retain", "outputs": outputs})
    return out


def units_to_gpus(units: int) -> int | float:
    """Budget units as GPUs: an int when whole (840 -> 1, 7 x 120 -> 1), else to the hundredth
    (120 -> 0.14, 420 -> 0.5)."""
    whole, rest = divmod(units, GPU_UNITS)
    return whole if not rest else round(units / GPU_UNITS, 2)


def units_as_gpus(units: int | str) -> str:
    """units_to_gpus of a quantity (Kueue's status strings) as text; unreadable is "0"."""
    try:
        u = int(parse_quantity(str(units)))
    except QuantityError:
        return "0"
    return str(units_to_gpus(u))


# --- what a node advertises ------------------------------------------------------------------------


class NodeSharing(NamedTuple):
    """How one node shares its GPUs, from its labels and allocatable."""

    mode: Mode
    model: Model | None
    whole: int  # GPUs handed out whole (allocatable nvidia.com/gpu, but not MIG single's slices)
    slices: Mapping[str, int] = MappingProxyType({})  # profile name (or "shared") -> allocatable
    shared_gpus: int = 0  # physical GPUs cut into the slices
    replicas: int = 0  # time-slicing / MPS replicas per GPU

    @property
    def shared_resources(self) -> dict[str, int]:
        """Allocatable per slice resource name."""
        return {slice_resource(self.mode, p): n for p, n in self.slices.items()}


def _int(v: Any) -> int:
    try:
        return max(0, math.floor(parse_quantity(str(v)))) if v is not None else 0
    except QuantityError:
        return 0


def _labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}


def labels_model(lab: Mapping[str, str]) -> Model | None:
    """The MIG-capable GPU model a node's labels name: GFD's nvidia.com/gpu.product, else gpuctl's
    runwhere.ai/gpu-type, else GFD's nvidia.com/gpu.memory where the size names one model."""
    m = model_named(lab.get(PRODUCT_LABEL)) or model_named(lab.get(Labels.GPU_TYPE))
    return m or (model_by_memory(_int(lab.get(MEMORY_LABEL))) if lab.get(MEMORY_LABEL) else None)


def node_model(node: Mapping[str, Any]) -> Model | None:
    return labels_model(_labels(node))


def node_sharing(node: Mapping[str, Any]) -> NodeSharing:
    """What the node advertises: MIG mixed (allocatable `nvidia.com/mig-*`), MIG single (label
    `nvidia.com/mig.strategy=single` or a `-MIG-<profile>` product), time-slicing / MPS
    (`nvidia.com/gpu.shared`, label `nvidia.com/gpu.sharing-strategy`), or none."""
    lab = _labels(node)
    alloc = (node.get("status") or {}).get("allocatable") or {}
    model = node_model(node)
    whole = _int(alloc.get(GPU_RESOURCE))
    physical = _int(lab.get(COUNT_LABEL))
    mig = {profile_of_resource(r): _int(v) for r, v in alloc.items() if r.startswith(MIG_RESOURCE_PREFIX)}
    mig = {p: n for p, n in mig.items() if p and n > 0}
    product = lab.get(PRODUCT_LABEL, "")
    single = re.search(r"-MIG-([1-7]g\.\d+gb)", product, re.IGNORECASE)
    if mig:
        used = sum(_gpus_of(p, n, _int(lab.get(REPLICAS_LABEL))) for p, n in mig.items())
        shared = max(physical - whole, 0) if physical else math.ceil(used)
        return NodeSharing(Mode.MIG_MIXED, model, whole, mig, shared)
    if single or (lab.get(MIG_STRATEGY_LABEL) == "single" and whole):
        prof = single.group(1).lower() if single else "mig"
        return NodeSharing(Mode.MIG_SINGLE, model, 0, {prof: whole}, physical or whole)
    shared_n = _int(alloc.get(SHARED_GPU_RESOURCE))
    strategy = lab.get(SHARING_STRATEGY_LABEL, "")
    if shared_n or strategy in ("time-slicing", "mps"):
        mode = Mode.MPS if strategy == "mps" else Mode.TIME_SLICING
        replicas = _int(lab.get(REPLICAS_LABEL)) or (shared_n // physical if physical else 0)
        gpus = physical or (math.ceil(shared_n / replicas) if replicas else 0)
        slices = {"shared": shared_n} if shared_n else {}
        return NodeSharing(mode, model, whole, slices, gpus, replicas)
    return NodeSharing(Mode.NONE, model, whole)


def _gpus_of(profile: str, n: int, replicas: int) -> Fraction:
    """How many GPUs n instances of a MIG profile fill; n time-sliced replicas of one (`1g.10gb.shared`)
    fill 1/replicas of that (the node's nvidia.com/gpu.replicas, else SHARED_REPLICAS_CHARGED)."""
    base = profile.removesuffix(SHARED_SUFFIX)
    per_gpu = (PROFILES.get(base) or _fallback(base)).per_gpu
    if base != profile:
        per_gpu *= replicas or SHARED_REPLICAS_CHARGED
    return Fraction(n, per_gpu)


def _fallback(profile: str) -> Profile:
    """A profile the table does not know: its compute share, one per compute slice."""
    m = re.match(r"^([1-7])g\.(\d+)gb", profile)
    g = int(m.group(1)) if m else COMPUTE_SLICES
    return Profile(profile, g, g, max(1, COMPUTE_SLICES // g), int(m.group(2)) if m else 0)


def slice_resource(mode: Mode, profile: str) -> str:
    """The resource a pod asks for to get one slice of this kind on a node in this mode."""
    if mode is Mode.MIG_MIXED:
        return MIG_RESOURCE_PREFIX + profile.replace("+", ".")
    if mode in (Mode.TIME_SLICING, Mode.MPS):
        return SHARED_GPU_RESOURCE
    return GPU_RESOURCE  # MIG single: the slices are nvidia.com/gpu


class PoolSharing(NamedTuple):
    """How a pool's Ready nodes share their GPUs, summed: the mode (MIG mixed if any node is, then MIG
    single, then time-slicing / MPS), the GPU model of its MIG nodes, and per slice kind (a MIG profile,
    or "shared" for a replica) how many the nodes offer."""

    mode: Mode = Mode.NONE
    model: Model | None = None
    whole: int = 0  # GPUs handed out whole
    shared_gpus: int = 0  # GPUs cut into slices
    slices: Mapping[str, int] = MappingProxyType({})  # profile -> allocatable
    replicas: int = 0  # time-slicing / MPS replicas per GPU (the largest of the nodes')

    @property
    def profiles(self) -> set[str]:
        return set(self.slices)

    def resource(self, profile: str) -> str:
        return slice_resource(self.mode, profile)


_MODE_ORDER = (Mode.MIG_MIXED, Mode.MIG_SINGLE, Mode.MPS, Mode.TIME_SLICING)


def pool_sharing(nodes: list[Mapping[str, Any]]) -> PoolSharing:
    """The sharing of a pool from the nodes given: its nodes that count, which
    gpuctl.domain.pools.pools_sharing chooses (`node_ready`) for every caller."""
    per = [node_sharing(n) for n in nodes]
    modes = {s.mode for s in per}
    mode = next((m for m in _MODE_ORDER if m in modes), Mode.NONE)
    slices: dict[str, int] = {}
    for s in per:
        if s.mode is mode:
            for p, n in s.slices.items():
                slices[p] = slices.get(p, 0) + n
    models = [s.model for s in per if s.model is not None and (s.mode is mode or mode is Mode.NONE)]
    return PoolSharing(
        mode=mode,
        model=max(set(models), key=models.count, default=None) if models else None,
        whole=sum(s.whole for s in per),
        shared_gpus=sum(s.shared_gpus for s in per),
        slices=dict(sorted(slices.items(), key=lambda kv: (_order(kv[0]), kv[0]))),
        replicas=max((s.replicas for s in per), default=0),
    )


def _order(profile: str) -> Fraction:
    p = PROFILES.get(profile)
    return p.share if p is not None else Fraction(0)


def slice_view(ps: PoolSharing, used: Mapping[str, int] | None) -> dict[str, dict]:
    """Per slice kind of a pool (a MIG profile, or "shared"): its resource, how many the nodes offer,
    and, when the caller counted what pods hold (`used`: resource -> count), used and free."""
    out = {}
    for prof, total in ps.slices.items():
        r = ps.resource(prof)
        held = None if used is None else used.get(r, 0)
        out[prof] = {
            "resource": r,
            "total": total,
            "used": held,
            "free": None if held is None else max(total - held, 0),
        }
    return out


def slices_used_text(ps: PoolSharing, held: Mapping[str, int]) -> str | None:
    """What `gpuctl serve` writes on a pool's ResourceFlavor (SLICES_USED_ANNOTATION): the pool's slice
    resources in use, compact JSON; None for a pool that does not share its GPUs (nothing to write)."""
    if ps.mode is Mode.NONE or not ps.slices:
        return None
    used = {ps.resource(p): held.get(ps.resource(p), 0) for p in ps.slices}
    return json.dumps(dict(sorted(used.items())), separators=(",", ":"))


def slices_used(text: str | None) -> dict[str, int] | None:
    """The counts of a SLICES_USED_ANNOTATION; None when absent or unreadable (then only totals show)."""
    try:
        data = json.loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    return {str(k): v for k, v in data.items() if isinstance(v, int) and not isinstance(v, bool) and v >= 0}


def describe_pool_sharing(ps: PoolSharing) -> str:
    """One line for people: "6 GPUs + 2 as 14 x 1g.10gb" (MIG), "2 GPUs as 8 x shared (time-slicing,
    memory not isolated)", "8 GPUs" (no sharing)."""
    if ps.mode is Mode.NONE or not ps.slices:
        return f"{ps.whole} GPUs"
    cut = ", ".join(f"{n} x {p}" for p, n in ps.slices.items())
    head = f"{ps.whole} GPUs + {ps.shared_gpus}" if ps.whole else f"{ps.shared_gpus} GPUs"
    how = {
        Mode.MIG_MIXED: "",
        Mode.MIG_SINGLE: " (MIG single)",
        Mode.TIME_SLICING: " (time-slicing, memory not isolated)",
        Mode.MPS: " (MPS)",
    }[ps.mode]
    return f"{head} as {cut}{how}"


# --- gpu-share --------------------------------------------------------------------------------------


class ShareError(ValueError):
    """A gpu-share placement that cannot be met; the message names the fix."""


class ShareAsked(Protocol):
    """A `gpu-share` value as the spec read it (gpuctl.spec.share.GpuShare: the grammar lives there, so a bad
    value is refused when the file is loaded): the text as written, and a MIG profile or memory bytes."""

    @property
    def text(self) -> str: ...

    @property
    def profile(self) -> str | None: ...

    @property
    def memory(self) -> int | None: ...


def models_lack(models: Collection[Model], profile: str) -> bool:
    """No GPU of these models (a pool's) has this MIG profile: a pod asking for it could never run there.
    False when no model is known (nothing proves it)."""
    return bool(models) and all(m.profile(profile) is None for m in models)


def lacking_profile_text(pool: str, models: Collection[Model], profile: str) -> str:
    """Why a MIG profile cannot run on a pool whose GPUs lack it, and the profiles they have: one text
    for `gpuctl create`'s precheck and the webhook's `mig-profile`."""
    names = "/".join(sorted(m.name for m in models))
    have = sorted({p.name for m in models for p in m.profiles}, key=lambda n: (_order(n), n))
    return f"the GPUs of pool {pool} ({names}) have no MIG profile {profile}; they have {', '.join(have)}"


def smallest_profile(model: Model, memory: int) -> Profile | None:
    """The smallest profile of `model` holding `memory` bytes (a profile's `Ngb` is GB as NVIDIA
    rounds it: 10gb holds 10Gi); media-extension profiles are only given by name."""
    fits = [p for p in model.profiles if not p.media and p.memory_gb * GIB >= memory]
    return min(fits, key=lambda p: (p.share, p.memory_gb), default=None)


class Slice(NamedTuple):
    """What a `gpu-share` asks for on one pool: the resource and one of it, and what it means."""

    resource: str
    profile: str  # the MIG profile, or "shared" for a time-slicing / MPS replica
    mode: Mode
    memory: int | None  # bytes asked for (None when a profile was named)

    @property
    def units(self) -> int:
        return resource_units(self.resource) or GPU_UNITS


def choose_slice(asked: ShareAsked, pool: str, mode: Mode, model: Model | None, profiles: set[str]) -> Slice:
    """The slice `gpu-share` asks for on a pool that shares its GPUs this way and whose nodes offer these
    profiles (MIG). Raises ShareError naming the fix."""
    share, prof, memory = asked.text, asked.profile, asked.memory
    if mode is Mode.NONE:
        raise ShareError(f"pool {pool} does not share its GPUs (no MIG, time-slicing or MPS)")
    if mode in (Mode.TIME_SLICING, Mode.MPS):
        return Slice(SHARED_GPU_RESOURCE, "shared", mode, memory)
    if prof is None:
        if model is None:
            raise ShareError(
                f"pool {pool}: its GPU model is unknown (no nvidia.com/gpu.product label), so a memory "
                "size cannot be turned into a MIG profile; name the profile (gpu-share: 1g.10gb)"
            )
        best = smallest_profile(model, memory or 0)
        if best is None:
            raise ShareError(
                f"pool {pool}: no MIG profile of {model.name} holds {share} (largest "
                f"{model.profiles[-1].name}); ask for a whole GPU (gpu: 1) instead of gpu-share"
            )
        prof = best.name
    if model is not None and models_lack((model,), prof):
        raise ShareError(f"{lacking_profile_text(pool, (model,), prof)}: ask for one of those")
    if mode is Mode.MIG_SINGLE:
        if prof not in profiles:
            cut = ", ".join(sorted(profiles))
            raise ShareError(
                f"pool {pool} is cut into {cut} (MIG single): gpu-share {share} needs {prof}; "
                f"ask for {cut} or use another pool"
            )
        return Slice(GPU_RESOURCE, prof, mode, memory)
    if prof not in profiles and prof + SHARED_SUFFIX in profiles:
        # MIG + time-slicing: only replicas of the instance are offered; one of them (memory shared).
        return Slice(
            MIG_RESOURCE_PREFIX + prof.replace("+", ".") + SHARED_SUFFIX, prof + SHARED_SUFFIX, mode, memory
        )
    if prof not in profiles:
        offered = ", ".join(sorted(profiles)) or "none"
        raise ShareError(
            f"pool {pool} offers no {prof} MIG instances (it has {offered}); ask for one of those, "
            "or have an admin add the profile (docs/sharing.md)"
        )
    return Slice(MIG_RESOURCE_PREFIX + prof.replace("+", "."), prof, mode, memory)
