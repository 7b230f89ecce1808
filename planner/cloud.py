"""The cloud's market: what a rented node costs and how much of it serves (docs/optimizer.md, "Cloud").

Three ways to rent a system, each a `SystemOffer` the optimizer prices:

- **on demand** (`pricing="on-demand"`): a count per period, billed per hour rented. With a minimum billing of
  m hours per rental and a start-up lead time L (the node is started L before its first period, so it is
  ready), a rental of D hours of consecutive periods is billed L + max(D, m - L) hours.
- **committed** (`pricing="reserved"`): a constant count all year at a committed price, from the catalog (a
  capacity block), `reserved_usd_per_hour`, or `commitments:` (a term in months with a price or a discount off
  on demand). Periods recur daily, so every commitment, a month's or three years', is a constant count: the
  cheapest per hour is offered, and its term says what the buyer signs for (term x 8760 x price per node).
- **spot** (`pricing="spot"`): a count per period like on demand, at the spot price, with its capacity derated
  by its availability. Interrupted at rate lambda per hour and replaced after tau hours, a spot slot serves a
  share A = 1 / (1 + lambda tau) of its hours (an alternating renewal process: up 1/lambda on average, down
  tau). Each spot option's requests/s is A times the node's, and spot nodes may carry at most `max_share` of a
  workload's demand in a period (interruptions are correlated: a reclaimed pool leaves together).

A rise of demand the periods do not foresee must be absorbed while new nodes start: with growth g (a share of
demand per hour) and lead time L, the nodes rented per period (those started for it) hold g L of what they carry
in reserve (`demand_headroom`; planner/optimize/model.py `capacity_rate`); bought and reserved nodes start nothing
and hold none.

Rentals (`RentalDay`, `rental_bill`): a node rented through consecutive periods (in the order listed, a day) is one
rental, billed its lead time once and at least the minimum billing once (planner/optimize/billing.py `add_rentals`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import Field, model_validator

from planner.catalog import Catalog, InputModel, Name
from planner.errors import PlannerInputError

HOURS_PER_YEAR = 8760.0
UsdPerHour = Annotated[float, Field(gt=0, le=1e5)]
DAYS_PER_YEAR = 365.0


@dataclass(frozen=True)
class SystemOffer:
    """A system the scenario allows, with the price that applies (catalog or scenario override)."""

    system: str
    site: str  # "on-prem" | "cloud"
    pricing: str  # "capex" (on-prem) | "on-demand", "spot" (cloud, per period) | "reserved" (cloud, constant all year)
    price_usd: float | None
    usd_per_hour: float | None
    power_kw: float | None
    rack_units: int | None
    price_note: str
    capacity_factor: float = 1.0  # A: the share of its hours a node serves (spot: 1 / (1 + lambda tau))
    term_months: float | None = None  # a commitment's term (reserved offers)


class CommitmentSpec(InputModel):
    """A committed price: a constant count all year, signed for `term_months` (1: monthly, 12: one year, 36: three
    years). The price is per system (`usd_per_hour`) or a discount off each system's on-demand price."""

    term_months: float = Field(ge=1, le=120)
    usd_per_hour: dict[Name, UsdPerHour] = Field(default_factory=dict)
    discount_fraction: float | None = Field(default=None, ge=0, lt=1)
    source: str | None = Field(default=None, max_length=500)  # where the price comes from (a quote, a price list)

    @model_validator(mode="after")
    def _one_price(self):
        if bool(self.usd_per_hour) == (self.discount_fraction is not None):
            raise ValueError("give either usd_per_hour (per system) or discount_fraction (off the on-demand price), "
                             "not both and not neither")  # fmt: skip
        return self


class SpotSpec(InputModel):
    """Spot (preemptible) nodes: rented per period at the spot price, capacity derated by interruptions."""

    interruptions_per_hour: float = Field(ge=0, le=10)  # lambda: no public figure per instance type; state yours
    replacement_minutes: float | None = Field(default=None, ge=0, le=1440)  # tau (None: sites.cloud.start_up_minutes)
    systems: list[Name] | None = None  # None: every cloud system with a spot price (scenario or catalog)
    usd_per_hour: dict[Name, UsdPerHour] = Field(default_factory=dict)
    max_share: float = Field(default=1.0, ge=0, le=1)  # most of a workload's demand spot nodes carry in a period


def spot_availability(interruptions_per_hour: float, replacement_hours: float) -> float:
    """A = 1 / (1 + lambda tau): the long-run share of hours a spot slot serves (up 1/lambda, down tau)."""
    return 1.0 / (1.0 + interruptions_per_hour * replacement_hours)


@dataclass(frozen=True)
class RentalDay:
    """The periods as one day, for billing rentals: the periods recur daily in the order the scenario lists them
    (block b[t] = hours_per_year / 365 hours a day); `cyclic` when they fill the year (the last one is followed by
    the first of the next day), else a chain (the rest of the day has no demand and no node is rented in it).

    A rental is a node rented through consecutive periods: it is started L hours before its first period (billed)
    and billed L + max(D, m - L) hours for D hours of periods (m: the minimum billing). For a rental started in
    period tau: `window[tau]` = K(tau), tau and the periods after it that lie wholly within its first m - L hours
    (it may run through them at no extra cost); `residual[tau]` = r(tau) = m - L - the hours of K(tau) when that is
    positive (billed if it stops at the end of K(tau)); `after[tau]` = t*(tau), the period that follows K(tau) (None
    at the end of a chain: r(tau) is then always billed). `constant`: m - L covers the whole day (a rental runs
    all day: the count is the same in every period)."""

    order: tuple[str, ...]
    blocks: dict[str, float]
    cyclic: bool
    start_up_hours: float
    window: dict[str, tuple[str, ...]]
    residual: dict[str, float]
    after: dict[str, str | None]
    constant: bool

    def previous(self, period: str) -> str | None:
        """The period before `period` in the day (the last one before the first where the day is cyclic)."""
        index = self.order.index(period)
        if index == 0:
            return self.order[-1] if self.cyclic else None  # one period all year: itself (never started again)
        return self.order[index - 1]


def rental_day(periods, minimum_billing_hours: float, start_up_hours: float) -> RentalDay | None:
    """The day the rentals of `periods` (each with .name and .hours_per_year) are billed over; None where a rental
    costs only its hours (no minimum billing, no start-up), and periods are then independent."""
    if minimum_billing_hours <= 0 and start_up_hours <= 0:
        return None
    order = tuple(p.name for p in periods)
    blocks = {p.name: p.hours_per_year / DAYS_PER_YEAR for p in periods}
    day = sum(blocks.values())
    cyclic = day >= 24.0 - 1e-6
    span = minimum_billing_hours - start_up_hours  # the hours of periods a rental is billed for at least
    window, residual, after = {}, {}, {}
    for index, name in enumerate(order):
        covered, members, nxt = blocks[name], [name], None
        for step in range(1, len(order)):
            if not cyclic and index + step >= len(order):
                break
            following = order[(index + step) % len(order)]
            if covered + blocks[following] > span + 1e-9:
                nxt = following
                break
            covered += blocks[following]
            members.append(following)
        window[name] = tuple(members)
        residual[name] = max(0.0, span - covered) if covered < span - 1e-9 else 0.0
        after[name] = nxt if residual[name] > 0 else None
    constant = cyclic and span >= day - 1e-9
    return RentalDay(order, blocks, cyclic, start_up_hours, window, residual, after, constant)


def rental_bill(day: RentalDay, counts: dict[str, int]) -> tuple[int, float]:
    """(starts a day, minimum-billing hours a day beyond the periods' own) for a system rented `counts[t]` nodes in
    each period (idle ones included), as the program's rows bill them at their optimum (planner/optimize/billing.py
    `add_rentals`): starts s[t] = max(0, counts[t] - counts[t-1]); the rentals started in tau that stop at the end
    of K(tau) pay r(tau), the fewest the counts allow, cheapest first. Raises ValueError where the counts end a
    rental within its minimum (a count the program never gives)."""
    starts = {}
    for name in day.order:
        before = day.previous(name)
        starts[name] = max(0, counts.get(name, 0) - (counts.get(before, 0) if before is not None else 0))
    if day.constant and len({counts.get(name, 0) for name in day.order}) > 1:
        raise ValueError("a rental is billed at least the whole day: the count must be the same in every period")
    topped = 0.0
    for period in day.order:
        held = sum(starts[tau] for tau in day.order if period in day.window[tau])
        if held > counts.get(period, 0):
            raise ValueError(f"{held} rentals started earlier must still run in period {period}, billed at least "
                             f"their minimum; {counts.get(period, 0)} are rented there")  # fmt: skip
        continuing = sorted((day.residual[tau], tau) for tau in day.order if day.after[tau] == period)
        short = held + sum(starts[tau] for _, tau in continuing) - counts.get(period, 0)
        for residual, tau in continuing:  # the cheapest rentals stop at the end of their minimum
            if short <= 0:
                break
            stopped = min(short, starts[tau])
            topped += stopped * residual
            short -= stopped
    topped += sum(starts[tau] * day.residual[tau] for tau in day.order if day.residual[tau] > 0 and day.after[tau] is None)
    return sum(starts.values()), topped


def demand_headroom(growth_per_hour: float, start_up_hours: float) -> float:
    """g L: the share of demand a fleet must hold in reserve while nodes it starts for an unforeseen rise boot."""
    return growth_per_hour * start_up_hours


def cloud_offers(cloud, catalog: Catalog, file: str, start_up_hours: float) -> list[SystemOffer]:
    """The cloud site's offers: per system on demand (or all year when a rental is billed a day or more), the
    cheapest commitment, and spot where the scenario asks for it. `start_up_hours`: a rented node's lead time (the
    scenario's, else the catalog default's)."""
    offers = []
    for system_id in cloud.systems:
        system = catalog.systems[system_id]
        override = cloud.usd_per_hour.get(system_id)
        on_demand = override if override is not None else system.usd_per_hour
        note = "scenario override" if override is not None else f"catalog ({system.price_source_kind or 'source'})"
        all_year = []  # (usd_per_hour, note, term_months) of every constant-count price of this system
        if system.price_source_kind == "reserved" and override is None:  # a capacity block: a reservation itself
            all_year.append((on_demand, note, None))
        elif cloud.minimum_billing_hours >= 24:  # no rental follows a day: on demand is rented all year
            all_year.append((on_demand, f"{note}; rented all year: each rental is billed at least "
                                        f"{cloud.minimum_billing_hours:g} h", None))  # fmt: skip
        else:
            offers.append(SystemOffer(system=system_id, site="cloud", pricing="on-demand", price_usd=None,
                                      usd_per_hour=on_demand, power_kw=None, rack_units=None, price_note=note))  # fmt: skip
        reserved = cloud.reserved_usd_per_hour.get(system_id)
        if reserved is not None:
            all_year.append((reserved, "scenario reserved price", None))
        for index, commitment in enumerate(cloud.commitments):
            price = commitment.usd_per_hour.get(system_id)
            if price is None and commitment.discount_fraction is not None:
                price = on_demand * (1.0 - commitment.discount_fraction)
            if price is None:
                continue
            how = (f"{commitment.discount_fraction:.0%} off on demand {on_demand:g} USD/h"
                   if commitment.discount_fraction is not None else "scenario price")  # fmt: skip
            source = f"; source: {commitment.source}" if commitment.source else ""
            all_year.append((price, f"commitments[{index}]: {commitment.term_months:g}-month term, {how}{source}",
                             commitment.term_months))  # fmt: skip
        if all_year:
            price, chosen, term = min(all_year, key=lambda entry: entry[0])
            dearer = [f"{p:g} USD/h ({n.split(':')[0]})" for p, n, _ in all_year if (p, n) != (price, chosen)]
            offers.append(SystemOffer(
                system=system_id, site="cloud", pricing="reserved", price_usd=None, usd_per_hour=price, power_kw=None,
                rack_units=None, term_months=term,
                price_note=chosen + (f"; cheapest of {len(all_year)} all-year prices (also {', '.join(dearer)})" if dearer else ""),
            ))  # fmt: skip
    if cloud.spot is not None:
        offers.extend(_spot_offers(cloud, catalog, file, start_up_hours))
    return offers


def _spot_offers(cloud, catalog: Catalog, file: str, start_up_hours: float) -> list[SystemOffer]:
    spot = cloud.spot
    tau_hours = spot.replacement_minutes / 60.0 if spot.replacement_minutes is not None else start_up_hours
    availability = spot_availability(spot.interruptions_per_hour, tau_hours)
    systems = spot.systems if spot.systems is not None else [
        s for s in cloud.systems if s in spot.usd_per_hour or catalog.systems[s].spot_usd_per_hour_max is not None]
    if not systems:
        raise PlannerInputError(file, "sites.cloud.spot", "no cloud system has a spot price: give "
                                "sites.cloud.spot.usd_per_hour.<system> or remove spot")  # fmt: skip
    offers = []
    for system_id in systems:
        system = catalog.systems[system_id]
        price = spot.usd_per_hour.get(system_id)
        if price is not None:
            note = "scenario spot price"
        elif system.spot_usd_per_hour_max is not None:
            price = system.spot_usd_per_hour_max
            low = f"{system.spot_usd_per_hour_min:g}-" if system.spot_usd_per_hour_min is not None else ""
            note = f"catalog spot range {low}{price:g} USD/h, its top (spot prices move hourly)"
        else:
            raise PlannerInputError(file, f"sites.cloud.spot.systems: {system_id}",
                                    f"the catalog has no spot price for '{system_id}'; give "
                                    f"sites.cloud.spot.usd_per_hour.{system_id}")  # fmt: skip
        note += (f"; serves {availability:.1%} of its hours (A = 1 / (1 + {spot.interruptions_per_hour:g}/h x "
                 f"{tau_hours * 60:g} min))")
        offers.append(SystemOffer(system=system_id, site="cloud", pricing="spot", price_usd=None, usd_per_hour=price,
                                  power_kw=None, rack_units=None, price_note=note, capacity_factor=availability))  # fmt: skip
    if spot.interruptions_per_hour > 0 and tau_hours <= 0:  # A = 1: interruptions that cost nothing
        raise PlannerInputError(
            file, "sites.cloud.spot.replacement_minutes",
            f"interruptions at {spot.interruptions_per_hour:g}/h need the minutes a reclaimed spot node takes to be "
            "replaced (a new node starts, loads the model and warms up: minutes, not 0); give "
            "sites.cloud.spot.replacement_minutes (or sites.cloud.start_up_minutes); 0 would serve every hour",
        )  # fmt: skip
    return offers
