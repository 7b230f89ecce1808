"""The shipped catalog's calibration fits, made once and shipped with the package (planner/perf/shipped_fits.json),
so that a first run, or any run with the cache off, fits nothing (about 3 s of every cold plan on a 2-core machine).

Each fit is kept under the key the disk cache would give it (planner/perf/fit_cache.py: the SHA-256 of the
performance model's code, of the catalog's content it reads and of the fit's arguments), so a fit made with other
code or another catalog is never read: it is fitted as before. The file is made again after a change of
planner/perf, planner/catalog or catalogs/ (tests/test_fit_cache.py fails until it is):

    python -m planner.perf.ship_fits
"""

from __future__ import annotations

import sys

from planner.catalog import Catalog, load_catalog
from planner.perf import fit_cache


def fresh_fits(catalog: Catalog) -> dict:
    """Key text -> fit of every generation's kernel factors and calibrated efficiency, fitted here (neither the disk
    cache nor the shipped file read, nothing kept)."""
    from planner.perf.calibration import _architectures, efficiency_for
    from planner.perf.kernel_fit import FITS, fit_kernels

    FITS.clear()  # the process's memo of kernel fits: each fitted here
    with fit_cache.fitting_afresh() as fits:
        for architecture in _architectures(catalog):
            fit_kernels(catalog, architecture)
            efficiency_for(catalog, architecture)
    return fits


def main() -> int:
    fits = fresh_fits(load_catalog())
    fit_cache.SHIPPED_FITS.write_text(fit_cache.shipped_document(fits), encoding="utf-8")
    print(f"{len(fits)} fits written to {fit_cache.SHIPPED_FITS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
