"""Filters for roles/specops_package (specops.package): what the specops wheel is built from, as one digest, and
what a host installs beside it."""

from __future__ import annotations

from specops import package

FILTERS = {
    "specops_source_digest": package.source_digest,
    "specops_host_requirements": package.host_requirements,
}
