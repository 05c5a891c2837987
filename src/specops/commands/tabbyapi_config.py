"""``specops tabbyapi-config --profile profile.yml``: the service profile as TabbyAPI's config.yml.

Exit status: 0 written, 2 bad input (unknown key, unknown cache mode, a model directory without config.json or
tokenizer.json, a draft whose vocabulary does not match the target's): one line on stderr, nothing written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from specops.pair import PairInputError
from specops.tabbyapi import TABBYAPI_COMMIT
from specops.tabbyapi.config import TabbyProfile, TabbyProfileError, render_config
from specops.tabbyapi.hfvocab import check_hf_pair

NAME = "tabbyapi-config"
HELP = "render a service profile (YAML) to TabbyAPI's config.yml, after checking the model directories and the pair"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", type=Path, required=True, help="profile YAML (keys: see specops.tabbyapi.config)")
    p.add_argument("--output", "-o", type=Path, help="write here instead of stdout")
    p.add_argument("--no-check-dirs", action="store_true",
                   help="do not look at the model directories (render for another host)")


def dump(config: dict) -> str:
    header = (f"# TabbyAPI config.yml rendered by specops for theroyallab/tabbyAPI {TABBYAPI_COMMIT[:9]}.\n"
              "# TabbyAPI ignores keys it does not know: edit the profile, not this file.\n")
    return header + yaml.safe_dump(config, sort_keys=False, default_flow_style=False)


def run(args: argparse.Namespace) -> int:
    try:
        data = yaml.safe_load(args.profile.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise TabbyProfileError(f"{args.profile}: not a YAML mapping")
        profile = TabbyProfile.from_dict(data, check_dirs=not args.no_check_dirs)
        if profile.draft_model and not args.no_check_dirs:
            report = check_hf_pair(profile.model, profile.draft_model)
            if not report.compatible:
                first = next(c for c in report.checks if not c.ok)
                raise TabbyProfileError(f"draft {profile.draft_model} does not match target {profile.model}: "
                                        f"{first.name}: {first.detail} (specops check-pair shows the whole report)")
        text = dump(render_config(profile))
    except (OSError, yaml.YAMLError, TabbyProfileError, PairInputError) as exc:
        print(f"specops tabbyapi-config: {exc}".replace("\n", " "), file=sys.stderr)
        return 2
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0
