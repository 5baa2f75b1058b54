#!/usr/bin/env python3
"""Writes the key names and default values of a MaxText base.yml, without its comments, as the
test data tests/config/data/maxtext_base_defaults.yml (tests/config/keys_test.cpp checks every key
against Precast's key registry). CI runs on a clean clone, so the data lives in the repository.

Usage: tools/extract_maxtext_defaults.py [MAXTEXT_BASE_YML] > tests/config/data/maxtext_base_defaults.yml
The default input is ../shared/reference/models/base.yml (MaxText's src/maxtext/configs/base.yml).
"""
import sys

import yaml

SOURCE_NOTE = "AI-Hypercomputer/maxtext src/maxtext/configs/base.yml @ e591f30 (2026-08-22)"


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "../shared/reference/models/base.yml"
    with open(path) as f:
        values = yaml.safe_load(f)
    print(f"# Key names and defaults of {SOURCE_NOTE}: {len(values)} keys, comments removed.")
    print("# Written by tools/extract_maxtext_defaults.py; PyYAML's reading of the file (as MaxText's")
    print("# loader reads it). Data for tests/config/keys_test.cpp, not a config to load.")
    for key, value in values.items():
        text = yaml.safe_dump({key: value}, default_flow_style=True, width=1 << 20).strip()
        print(text[1:-1])  # {key: value} -> key: value


if __name__ == "__main__":
    main()
