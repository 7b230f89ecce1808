"""Where a BOM line's price comes from and how firm it is (the BOM's `price_origin` column, issue 49 point 3).

A catalog price says its kind (`price_source_kind` in systems.yaml: list price, reserved list price, estimate,
placeholder) and its place: the shipped catalog, with the price's own source, or the user's catalog file. A price
the user gave says "yours" and the file (and field) it is in:

    estimate (shipped catalog: press reports 2024 (estimate))
    list price (shipped catalog: AWS on-demand price list via SkyPilot catalog (vms.csv), us-east-1, read 2026-11)
    yours (my-lab/systems.yaml), placeholder: get a quote
    yours (scenario chat.yaml: sites.on_prem.price_usd)

Every origin whose price has no public figure contains "placeholder" (`Bom.placeholders`).
"""

from __future__ import annotations

from planner.catalog import Catalog
from planner.catalog.entries import SHIPPED_LAYER

KIND_TEXT = {
    "list-price": "list price",
    "reserved": "reserved list price",
    "estimate": "estimate",
    "placeholder": "placeholder: get a quote",
    None: "kind not stated",
}


def _price_part(source: str) -> str:
    """The part of a catalog entry's `source` about its price ('price: press reports 2024 (estimate)' ->
    'press reports 2024 (estimate)'; a price list's sentence), else the whole source."""
    parts = [part.strip() for part in source.split(";")]
    priced = [part for part in parts if "price" in part.lower()]
    text = priced[0] if priced else source.strip()
    return text.removeprefix("price:").strip()


def catalog_price_origin(catalog: Catalog, system_id: str, what: str = "") -> str:
    """The origin of the catalog's price of `system_id` (`what`: ' spot range top' and the like, after the place)."""
    system = catalog.systems[system_id]
    origin, file, kind = catalog.price_layers.get(system_id, (SHIPPED_LAYER, "", system.price_source_kind))
    if origin == SHIPPED_LAYER:
        return f"{KIND_TEXT.get(kind, kind)} (shipped catalog{what}: {_price_part(system.source)})"
    stated = f", {KIND_TEXT[kind]}" if kind in KIND_TEXT and kind is not None else ""
    return f"yours ({file}{what}){stated}"


def _yours(scenario_file: str, field: str) -> str:
    return f"yours (scenario {scenario_file}: {field})"


def offer_price_origin(offer, catalog: Catalog, scenario_file: str) -> str:
    """The origin of the price a plan line pays for `offer` (planner.cloud.SystemOffer), read from the offer's
    `price_note` as planner/scenario and planner/cloud write it; a note of another form is quoted as it is."""
    note = offer.price_note
    if note.startswith("catalog spot range"):
        return catalog_price_origin(catalog, offer.system, " spot range, its top")
    if note.startswith("catalog"):
        return catalog_price_origin(catalog, offer.system)
    if note.startswith("scenario override"):
        field = "sites.on_prem.price_usd" if offer.site == "on-prem" else "sites.cloud.usd_per_hour"
        return _yours(scenario_file, f"{field}.{offer.system}")
    if note.startswith("scenario reserved price"):
        return _yours(scenario_file, f"sites.cloud.reserved_usd_per_hour.{offer.system}")
    if note.startswith("scenario spot price"):
        return _yours(scenario_file, f"sites.cloud.spot.usd_per_hour.{offer.system}")
    if note.startswith("commitments["):
        field = f"sites.cloud.{note.split(':')[0]}"
        if "off on demand" in note:  # the user's discount on the on-demand price, whoever gave that
            system = catalog.systems[offer.system]
            on_demand = (catalog_price_origin(catalog, offer.system) if f"off on demand {system.usd_per_hour:g} USD/h" in note
                         else _yours(scenario_file, f"sites.cloud.usd_per_hour.{offer.system}"))  # fmt: skip
            return f"{_yours(scenario_file, field + ' discount')} off the on-demand price: {on_demand}"
        return _yours(scenario_file, field)
    return note
