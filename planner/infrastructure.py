"""What an on-prem fleet costs beyond its servers (issue 34), and capital as an annuity.

Per node, linear in the node count (priced into each candidate, planner/candidates.py `on_prem_annual_cost_usd`):
- capital: price x a(r, n), the annuity factor a(r, n) = r / (1 - (1 + r)^-n) at cost of capital r over n years
  (r = 0: 1 / n, the straight line);
- energy: kW x power factor x PUE x USD/kWh x 8760 h;
- support: the maintenance fraction x price per year;
- facility: kW x USD per kW per month x 12 (colocation: space, power and cooling plant);
- software: GPUs x USD per GPU per year (cloud GPUs pay it per hour rented: `cloud_software_usd_per_hour`);
- installation: the installation fraction x price, as capital (x a(r, n));
- storage: TB per node x USD per TB, as capital (x a(r, n)): shared storage bought with each node, beyond the
  drives its price includes (a site figure: left out with the racks and networks, `infrastructure: {include: false}`).

Per site, in whole units (integer variables of the program, planner/optimize/billing.py `add_site_infrastructure`):
- racks of whole nodes of one system, ceil(nodes / nodes per rack) with nodes per rack = min(floor(kW per rack /
  node kW), floor(RU per rack / node RU)), at least 1, each rack with its PDUs; a rack-scale system (GB200 NVL72)
  is a rack itself, with its own power shelves (no site rack, no PDUs);
- per network (the compute fabric: a node's network_gbit_per_s over the port speed; the front-end: a fixed number
  of ports per node), one switch while the ports fit in it, else a two-tier leaf-spine: leaves L >= ports / (P/2)
  (half of a leaf's P ports face the nodes), spines S >= L / 2; links: one per node port and P/2 per leaf.
Their capex is annualized with the same annuity factor. Every figure comes from catalogs/defaults.yaml (cited,
estimate or placeholder) or the scenario, and the plan's infrastructure lines say which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

HOURS_PER_YEAR = 8760.0

# the figures of a site's racks and networks (catalog defaults, overridable under sites.on_prem.infrastructure)
INFRASTRUCTURE_FIELDS = (
    "rack_units_per_rack", "kw_per_rack", "rack_usd", "pdus_per_rack", "pdu_usd",
    "fabric_port_gbit_per_s", "fabric_switch_ports", "fabric_switch_usd", "fabric_link_usd",
    "frontend_ports_per_node", "frontend_switch_ports", "frontend_switch_usd", "frontend_link_usd",
    "storage_tb_per_node", "storage_usd_per_tb",
)  # fmt: skip
# per-node finance figures (catalog defaults, overridable under sites.on_prem)
FINANCE_FIELDS = ("cost_of_capital_per_year", "software_usd_per_gpu_per_year", "facility_usd_per_kw_per_month",
                  "installation_fraction_of_capex", "maintenance_fraction_per_year")  # fmt: skip
# the CostBreakdown figure (planner.plan) each kind of infrastructure line adds to (optimize/readback._totals);
# 'other': a line of a plan file saved before lines had a kind, whose item name says nothing
BREAKDOWN_OF_KIND = {
    "support": "maintenance", "facility": "facility", "software": "software", "installation": "infrastructure",
    "rack": "infrastructure", "pdu": "infrastructure", "fabric": "infrastructure", "frontend": "infrastructure",
    "storage": "infrastructure", "other": "infrastructure",
    "on-demand": "cloud_on_demand", "spot": "cloud_spot",  # rentals' start-up and minimum billing (rental_lines)
}  # fmt: skip


@dataclass(frozen=True)
class Figure:
    """One cost figure as the plan uses it: its value, where it comes from, and how firm it is."""

    value: float
    source: str
    kind: str  # cited | estimate | placeholder (catalogs/defaults.yaml) | user (the scenario's own figure)

    @property
    def origin(self) -> str:
        return "scenario" if self.kind == "user" else f"catalog default ({self.kind})"


@dataclass(frozen=True)
class Infrastructure:
    """A site's racks and networks: the figures of INFRASTRUCTURE_FIELDS, each a Figure."""

    figures: dict[str, Figure] = field(default_factory=dict)

    def __getattr__(self, name: str) -> float:
        figures = self.__dict__.get("figures", {})
        if name in figures:
            return figures[name].value
        raise AttributeError(name)


def annuity_factor(rate: float, years: float) -> float:
    """a(r, n) = r / (1 - (1 + r)^-n): the yearly payment per USD of capital repaid over n years at rate r; 1 / n
    at r = 0 (straight-line amortization)."""
    if rate <= 0:
        return 1.0 / years
    return rate / (1.0 - (1.0 + rate) ** -years)


def fabric_ports(network_gbit_per_s: float | None, infrastructure: Infrastructure) -> int:
    """Compute-fabric ports of a node: its scale-out bandwidth over the port speed (DGX H100: 3,200 / 400 = 8)."""
    if not network_gbit_per_s:
        return 0
    return math.ceil(network_gbit_per_s / infrastructure.fabric_port_gbit_per_s - 1e-9)


def nodes_per_rack(power_kw: float | None, rack_units: int | None, infrastructure: Infrastructure) -> int | None:
    """Whole nodes of a system one rack holds: min(floor(kW per rack / node kW), floor(RU per rack / node RU)), at
    least 1 (a node beyond the rack's budget takes a rack of its own); None where the node states neither figure
    (it is counted in no rack, as the budgets count it in no kW or RU)."""
    fits = []
    if power_kw:
        fits.append(math.floor(infrastructure.kw_per_rack / power_kw + 1e-9))
    if rack_units:
        fits.append(math.floor(infrastructure.rack_units_per_rack / rack_units + 1e-9))
    return max(1, min(fits)) if fits else None


def rack_count(nodes_by_system: dict[str, int], systems, infrastructure: Infrastructure) -> tuple[int, int]:
    """(site racks, rack-scale systems) for the bought nodes (spares included) of each system: racks hold whole
    nodes of one system, ceil(nodes / nodes_per_rack) each; a rack-scale system (catalog `rack_scale`, GB200 NVL72)
    is a rack itself. The integer program's rows (`add_site_infrastructure`) give the same at its optimum."""
    racks = rack_scale = 0
    for system_id, nodes in nodes_by_system.items():
        system = systems[system_id]
        if nodes <= 0:
            continue
        if system.rack_scale:
            rack_scale += nodes
            continue
        per_rack = nodes_per_rack(system.power_kw, system.rack_units, infrastructure)
        if per_rack is not None:
            racks += math.ceil(nodes / per_rack)
    return racks, rack_scale


def switches_for(ports: int, switch_ports: int) -> tuple[int, int, int]:
    """(switches, leaves, spines) for `ports` node ports: one switch while they fit, else the fewest leaves with
    half their ports facing nodes, and the spines their uplinks need. The integer program's rows give the same."""
    if ports <= 0:
        return 0, 0, 0
    if ports <= switch_ports:
        return 1, 0, 0
    leaves = math.ceil(ports / (switch_ports // 2))
    spines = math.ceil(leaves / 2)
    return leaves + spines, leaves, spines


def cloud_software_usd_per_hour(gpus_per_node: int, software_usd_per_gpu_per_year: float) -> float:
    """Software licences of a rented node per hour: the yearly per-GPU figure prorated to the hours rented."""
    return gpus_per_node * software_usd_per_gpu_per_year / HOURS_PER_YEAR


def node_extras_usd_per_year(pricing: str, price_usd: float, power_kw: float, gpus: int, costs,
                             cloud_software) -> dict[str, float]:  # fmt: skip
    """What one node adds per year beyond its line's cost (capital, energy, space), by BOM item: for a bought node
    support (maintenance fraction x price), facility (kW x USD/kW/month x 12), software (GPUs x USD/GPU/year),
    installation (fraction x price, as capital: x a(r, n)) and storage (TB per node x USD per TB, as capital; where
    the site has its infrastructure); for a rented one its software licences (per year for a reserved node, per year
    of hours for an on-demand one: x hours / 8760 by the caller)."""
    if pricing == "capex":
        if costs is None:
            return {}
        site = costs.infrastructure
        return {
            "support": costs.maintenance_fraction_per_year * price_usd,
            "facility": power_kw * costs.facility_usd_per_kw_per_month * 12.0,
            "software": gpus * costs.software_usd_per_gpu_per_year,
            "installation": costs.installation_fraction_of_capex * price_usd * costs.annuity,
            "storage": site.storage_tb_per_node * site.storage_usd_per_tb * costs.annuity if site is not None else 0.0,
        }
    licence = cloud_software.value if cloud_software is not None else 0.0
    return {"software": gpus * licence}


def infrastructure_lines(scenario, catalog, lines) -> tuple:
    """The plan's BOM lines beyond its servers, from its server lines (planner.plan.PlanLine): on-prem support,
    facility, software, installation, racks with their PDUs and each network's switches and links (whole units, as
    the integer program counts them: `switches_for`, racks by RU and by kW), and the software licences of rented
    nodes. Each line's `annual_cost_usd` is in the plan's objective."""
    from planner.plan import PER_PERIOD_ROLES, InfrastructureLine

    out = []
    costs = scenario.on_prem_costs
    bought = [line for line in lines if line.site == "on-prem"]
    hours = {period.name: period.hours_per_year for period in scenario.periods}

    def add(kind, item, site, count, unit, unit_usd, capex, annual, figure_names):
        figures = [costs.figures[n] if costs is not None and n in costs.figures else _infra_figure(costs, n)
                   for n in figure_names]  # fmt: skip
        figures = [f for f in figures if f is not None]
        source = "; ".join(dict.fromkeys(f.source for f in figures))
        origin = _origin(figures)
        out.append(InfrastructureLine(item, site, round(count, 6), unit, round(unit_usd, 6), round(capex, 2),
                                      round(annual, 2), source, origin, kind))  # fmt: skip

    if bought and costs is not None:
        capex = sum(line.capex_usd for line in bought)
        kw = sum(line.power_kw for line in bought)
        gpus = sum(line.gpus for line in bought)
        nodes = sum(line.nodes for line in bought)
        if costs.maintenance_fraction_per_year > 0:
            add("support", "support contract", "on-prem", nodes, "node-year", costs.maintenance_fraction_per_year * capex / nodes, 0.0,
                costs.maintenance_fraction_per_year * capex, ["maintenance_fraction_per_year"])
        if costs.facility_usd_per_kw_per_month > 0:
            add("facility", "facility (colocation)", "on-prem", kw, "kW-year", costs.facility_usd_per_kw_per_month * 12, 0.0,
                kw * costs.facility_usd_per_kw_per_month * 12, ["facility_usd_per_kw_per_month"])
        if costs.software_usd_per_gpu_per_year > 0:
            add("software", "software licences", "on-prem", gpus, "GPU-year", costs.software_usd_per_gpu_per_year, 0.0,
                gpus * costs.software_usd_per_gpu_per_year, ["software_usd_per_gpu_per_year"])
        if costs.installation_fraction_of_capex > 0:
            once = costs.installation_fraction_of_capex * capex
            add("installation", "installation", "on-prem", 1, "site", once, once, once * costs.annuity,
                ["installation_fraction_of_capex", "cost_of_capital_per_year"])
        site = costs.infrastructure
        if site is not None and site.storage_tb_per_node * site.storage_usd_per_tb > 0:
            terabytes = site.storage_tb_per_node * nodes
            add("storage", f"shared storage ({site.storage_tb_per_node:g} TB per node)", "on-prem", terabytes, "TB",
                site.storage_usd_per_tb, terabytes * site.storage_usd_per_tb,
                terabytes * site.storage_usd_per_tb * costs.annuity, ["storage_usd_per_tb", "storage_tb_per_node"])
        if site is not None:
            nodes_by_system: dict[str, int] = {}
            for line in bought:
                nodes_by_system[line.system] = nodes_by_system.get(line.system, 0) + line.nodes
            racks, rack_scale = rack_count(nodes_by_system, catalog.systems, site)
            if racks:
                add("rack", "racks", "on-prem", racks, "rack", site.rack_usd, racks * site.rack_usd,
                    racks * site.rack_usd * costs.annuity, ["rack_usd", "rack_units_per_rack", "kw_per_rack"])
            if rack_scale:
                names = ", ".join(sorted(s for s in nodes_by_system if catalog.systems[s].rack_scale))
                out.append(InfrastructureLine(
                    f"rack-scale systems' own racks ({names}: enclosure, power shelves and busbar in the system's price)",
                    "on-prem", rack_scale, "rack", 0.0, 0.0, 0.0, "catalog systems: rack_scale (the system is a rack)",
                    "catalog default (cited)", "rack"))  # fmt: skip
            if racks:
                pdus = racks * int(site.pdus_per_rack)  # whole PDUs (Figure values are floats)
                add("pdu", "PDUs", "on-prem", pdus, "PDU", site.pdu_usd, pdus * site.pdu_usd, pdus * site.pdu_usd * costs.annuity,
                    ["pdu_usd", "pdus_per_rack"])
            for network, label in (("fabric", "compute fabric"), ("frontend", "front-end network")):
                if network == "fabric":
                    ports = sum(fabric_ports(catalog.systems[line.system].network_gbit_per_s, site) * line.nodes for line in bought)
                else:
                    ports = int(site.frontend_ports_per_node) * nodes
                switch_ports = int(getattr(site, f"{network}_switch_ports"))
                switches, leaves, _ = switches_for(ports, switch_ports)
                if not switches:
                    continue
                switch_usd, link_usd = getattr(site, f"{network}_switch_usd"), getattr(site, f"{network}_link_usd")
                links = ports + leaves * (switch_ports // 2)
                shape = "one switch" if leaves == 0 else f"{leaves} leaves + {switches - leaves} spines"
                add(network, f"{label} switches ({switch_ports} ports; {shape})", "on-prem", switches, "switch", switch_usd,
                    switches * switch_usd, switches * switch_usd * costs.annuity,
                    [f"{network}_switch_usd", f"{network}_switch_ports"])
                add(network, f"{label} links ({ports} node ports + {links - ports} uplinks)", "on-prem", links, "link", link_usd,
                    links * link_usd, links * link_usd * costs.annuity,
                    [f"{network}_link_usd"] + (["fabric_port_gbit_per_s"] if network == "fabric" else ["frontend_ports_per_node"]))
    out.extend(rental_lines(scenario, lines))
    licence = scenario.cloud_software
    if licence is not None and licence.value > 0:
        rented = [line for line in lines if line.site == "cloud"]
        gpu_years = sum(line.gpus * (hours.get(line.period, HOURS_PER_YEAR) if line.role in PER_PERIOD_ROLES else HOURS_PER_YEAR)
                        for line in rented) / HOURS_PER_YEAR  # fmt: skip
        if gpu_years > 0:
            out.append(InfrastructureLine("software licences", "cloud", round(gpu_years, 6), "GPU-year", licence.value, 0.0,
                                          round(gpu_years * licence.value, 2), licence.source, licence.origin,
                                          "software"))  # fmt: skip
    return tuple(out)


def rental_lines(scenario, lines) -> list:
    """What nodes rented per period are billed beyond their periods' hours (planner.cloud.rental_bill over the
    scenario's `rental_day`), per system and pricing: the start-up lead time of each start and the minimum billing
    of rentals shorter than it, in node-hours a year at the offer's price."""
    from planner.cloud import DAYS_PER_YEAR, rental_bill
    from planner.plan import PER_PERIOD_ROLES, InfrastructureLine

    day = scenario.rental_day
    if day is None:
        return []
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for line in lines:
        if line.role in PER_PERIOD_ROLES:
            per_period = counts.setdefault((line.system, line.role), {})
            per_period[line.period] = per_period.get(line.period, 0) + line.nodes
    out = []
    for (system, pricing), per_period in sorted(counts.items()):
        usd = next(o.usd_per_hour for o in scenario.offers if o.system == system and o.pricing == pricing)
        starts, topped = rental_bill(day, per_period)
        lead = DAYS_PER_YEAR * starts * day.start_up_hours
        if lead > 0:
            out.append(InfrastructureLine(
                f"{system} {pricing} start-up ({starts} rental{'s' if starts > 1 else ''} started a day, each "
                f"{day.start_up_hours * 60:g} min ahead of its period)", "cloud", round(lead, 6), "node-hour",
                round(usd, 6), 0.0, round(lead * usd, 2), *_lead_origin(scenario), pricing))  # fmt: skip
        if topped > 0:
            out.append(InfrastructureLine(
                f"{system} {pricing} minimum billing ({scenario.cloud_minimum_billing_hours:g} h per rental: "
                f"{topped:g} node-hours a day billed beyond the periods run)", "cloud", round(DAYS_PER_YEAR * topped, 6),
                "node-hour", round(usd, 6), 0.0, round(DAYS_PER_YEAR * topped * usd, 2),
                "sites.cloud.minimum_billing_hours", "scenario", pricing))  # fmt: skip
    return out


def _infra_figure(costs, name: str):
    """The Figure of a rack or network figure (None where the site has none)."""
    if costs is None or costs.infrastructure is None:
        return None
    return costs.infrastructure.figures.get(name)


_FIRMNESS = ("placeholder", "estimate", "cited")  # weakest first


def _origin(figures) -> str:
    """Where a line's figures come from, said by the weakest of them: 'scenario' when all are the user's, else the
    catalog default's least firm kind (and 'partly scenario' when some are the user's)."""
    defaults = [f.kind for f in figures if f.kind != "user"]
    if not defaults:
        return "scenario"
    weakest = next(kind for kind in _FIRMNESS if kind in defaults)
    return f"catalog default ({weakest})" + (", partly scenario" if len(defaults) < len(figures) else "")


def _lead_origin(scenario) -> tuple[str, str]:
    """(source, origin) of the rented nodes' lead time: the scenario's field, or the catalog default it fell to."""
    if scenario.cloud_start_up_source == "scenario":
        return "sites.cloud.start_up_minutes", "scenario"
    kind, _, source = scenario.cloud_start_up_source.removeprefix("catalog default (").partition("): ")
    return source, f"catalog default ({kind})"
