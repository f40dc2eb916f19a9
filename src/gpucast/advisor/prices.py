"""GPU prices as data: a table of hourly prices per GPU type, each with its offer, source and date.

Packaged tables (``src/gpucast/data/prices/``): ``cloud-2024`` (the default: on-demand list prices
of AWS, Google Cloud and Azure as their price pages showed them in 2024, per GPU-hour, labelled as
examples that go stale), ``cloud-2026`` (the GPUs of 2026 clusters: H100, H200, B200, GB200, GH200,
L40S, H100 PCIe/NVL on AWS, GCP, Azure, Lambda and CoreWeave, as public records of their price pages
showed them in 2026; no older GPUs) and ``gavel-2020`` (the GCP prices Gavel's cost policies used). A user's
own file (on-prem amortized, spot, reserved) has the same format::

    format: 1
    name: our-cluster          # optional
    currency: USD              # optional, USD by default
    prices:
      - {gpu: a100-80gb, usd_per_gpu_hour: 1.20, provider: on-prem, offer: "3-year amortized", as_of: 2026-11}
      - {gpu: t4, usd_per_gpu_hour: 0.11, provider: gcp, offer: spot}

Every ``gpu`` must be a catalog name (``gpucast gpus``) or the name of a GPU spec file given to the
same command; a GPU may have several offers (the cheapest is used unless a provider is chosen).
Anything wrong in the file is one :class:`PriceError` line naming the file and the entry.

Not modelled: the VM's CPU and memory where a cloud prices them apart from the GPU (GCP), storage,
network, per-second billing minimums, sustained-use discounts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

PACKAGED_DIR = Path(__file__).resolve().parents[1] / "data" / "prices"
DEFAULT_PRICES = "cloud-2024"
_FIELDS = {"gpu", "usd_per_gpu_hour", "provider", "offer", "as_of", "source"}


class PriceError(ValueError):
    """A price file or price choice is wrong; the message is one line."""


@dataclass(frozen=True)
class Price:
    gpu: str                 # catalog name, or a MIG slice of one (gpucast.mig)
    usd_per_gpu_hour: float
    provider: str = ""
    offer: str = ""
    as_of: str = ""
    source: str = ""

    def to_dict(self) -> dict:
        return {"gpu": self.gpu, "usd_per_gpu_hour": self.usd_per_gpu_hour, "provider": self.provider,
                "offer": self.offer, "as_of": self.as_of, "source": self.source}


@dataclass(frozen=True)
class PriceTable:
    name: str
    origin: str              # "packaged" or the file's path
    currency: str
    prices: tuple[Price, ...]

    def offers(self, gpu: str, provider: str | None = None) -> list[Price]:
        return [p for p in self.prices if p.gpu == gpu and (provider is None or p.provider == provider)]

    def price(self, gpu: str, provider: str | None = None) -> Price | None:
        """The cheapest offer for ``gpu`` (of ``provider`` when given); None when there is none.
        A MIG slice (``a100-80gb:1g.10gb``) the table does not price itself costs its compute
        slices' share of its whole GPU's price (:func:`slice_price`)."""
        offers = self.offers(gpu, provider)
        if offers:
            return min(offers, key=lambda p: p.usd_per_gpu_hour)
        return slice_price(self, gpu, provider) if ":" in gpu else None

    @property
    def gpus(self) -> list[str]:
        return list(dict.fromkeys(p.gpu for p in self.prices))

    @property
    def providers(self) -> list[str]:
        return list(dict.fromkeys(p.provider for p in self.prices if p.provider))

    def to_dict(self) -> dict:
        return {"name": self.name, "origin": self.origin, "currency": self.currency,
                "prices": [p.to_dict() for p in self.prices]}


def slice_price(table: "PriceTable", gpu: str, provider: str | None = None) -> Price | None:
    """A MIG slice's price from its whole GPU's cheapest offer: ``g / 7`` of it for a profile of
    ``g`` of the GPU's 7 compute slices (our rule, not a provider's: the slices one GPU holds at
    once then cost at most the GPU; a provider that sells slices is priced by a table entry naming
    the slice). None when the whole GPU has no price."""
    from gpucast import mig

    whole_name, prof = mig.split(gpu)
    whole = table.price(whole_name, provider)
    if whole is None:
        return None
    p = mig.profile(whole_name, prof)
    share = p.compute_slices / p.of_compute
    return Price(gpu, whole.usd_per_gpu_hour * share, whole.provider, whole.offer, whole.as_of,
                 f"{p.compute_slices}/{p.of_compute} of {whole_name}'s price (gpucast's MIG rule)"
                 + (f"; {whole.source}" if whole.source else ""))


def packaged() -> list[str]:
    """Names of the packaged price tables."""
    return sorted(p.stem for p in PACKAGED_DIR.glob("*.yaml"))


def load(source: str | Path | None = None, known_gpus: Iterable[str] = ()) -> PriceTable:
    """A price table: a packaged name (default :data:`DEFAULT_PRICES`) or a YAML/JSON file.
    ``known_gpus``: names of user GPU spec files that may be priced besides the catalog's."""
    source = DEFAULT_PRICES if source is None else source
    path = Path(source)
    name_like = isinstance(source, str) and "/" not in source and not path.suffix
    if name_like:
        if source not in packaged():
            raise PriceError(f"unknown price table {source!r} (packaged: {', '.join(packaged())}; or give a "
                             f"YAML file)")
        return _parse(_read(PACKAGED_DIR / f"{source}.yaml"), "packaged", str(source), known_gpus)
    return _parse(_read(path), str(path), path.stem, known_gpus)


def parse(doc, origin: str, name: str = "custom", known_gpus: Iterable[str] = ()) -> PriceTable:
    """A price table from a document already read (a mapping with ``prices``; or a bare list of
    entries), e.g. a request body; ``origin`` names it in errors."""
    if isinstance(doc, list):
        doc = {"prices": doc}
    return _parse(doc, origin, name, known_gpus)


def _read(path: Path):
    import yaml

    try:
        text = path.read_text()
    except OSError as exc:
        raise PriceError(f"cannot read prices file {str(path)!r}: {exc.strerror or exc}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = " ".join(str(exc).split())[:160]
        raise PriceError(f"prices file {str(path)!r} is not YAML/JSON: {first}") from None


def _parse(doc, origin: str, default_name: str, known_gpus: Iterable[str]) -> PriceTable:
    from gpucast.hardware import catalog

    where = (f"packaged prices {default_name!r}" if origin == "packaged" else
             origin if origin.startswith("field ") else f"prices file {origin!r}")
    if not isinstance(doc, dict) or not isinstance(doc.get("prices"), list) or not doc["prices"]:
        raise PriceError(f"{where}: needs a non-empty list 'prices' of {{gpu, usd_per_gpu_hour}} entries")
    if doc.get("format", 1) != 1:
        raise PriceError(f"{where}: format {doc.get('format')!r} is not supported (1)")
    extra = set(doc) - {"format", "name", "currency", "prices"}
    if extra:
        raise PriceError(f"{where}: unknown field {sorted(extra)[0]!r} (format, name, currency, prices)")
    currency = str(doc.get("currency", "USD"))
    if currency != "USD":
        raise PriceError(f"{where}: currency {currency!r}: only USD prices are read (convert them)")
    names = set(catalog()) | set(known_gpus)
    out = []
    for i, e in enumerate(doc["prices"], 1):
        at = f"{where}, entry {i}"
        if not isinstance(e, dict):
            raise PriceError(f"{at}: not a mapping with gpu and usd_per_gpu_hour")
        bad = set(e) - _FIELDS
        if bad:
            raise PriceError(f"{at}: unknown field {sorted(bad)[0]!r} ({', '.join(sorted(_FIELDS))})")
        gpu = e.get("gpu")
        if isinstance(gpu, str) and ":" in gpu:
            from gpucast.hardware import get_gpu

            try:
                gpu = get_gpu(gpu).name
            except KeyError as exc:
                raise PriceError(f"{at}: {exc}") from None
        elif not isinstance(gpu, str) or gpu not in names:
            import difflib

            close = difflib.get_close_matches(str(gpu), names, n=1)
            hint = f" (did you mean {close[0]}?)" if close else " (see `gpucast gpus`)"
            raise PriceError(f"{at}: unknown GPU {gpu!r}{hint}")
        usd = e.get("usd_per_gpu_hour")
        if isinstance(usd, bool) or not isinstance(usd, (int, float)) or not math.isfinite(usd) or usd < 0:
            raise PriceError(f"{at} ({gpu}): usd_per_gpu_hour must be a non-negative number, got {usd!r}")
        out.append(Price(gpu, float(usd), str(e.get("provider", "")), str(e.get("offer", "")),
                         str(e.get("as_of", "")), str(e.get("source", ""))))
    return PriceTable(str(doc.get("name", default_name)), origin, currency, tuple(out))
