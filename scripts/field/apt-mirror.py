#!/usr/bin/env python3
"""Prints the Debian mirror this machine's own apt sources use for its
Debian release, for scripts/field-test.sh's debootstrap (so the repository
names no mirror host).

Reads /etc/apt/sources.list and /etc/apt/sources.list.d/*.list (one-line
format: `deb [options] URI SUITE COMPONENT...`) and
/etc/apt/sources.list.d/*.sources (deb822: Types, URIs, Suites, Enabled),
in apt's order, and prints the first http(s) URI of a `deb` entry whose
suites include this machine's release codename (VERSION_CODENAME in
/etc/os-release, on a Debian machine). `deb-src` entries, disabled stanzas,
comments and other files are ignored. Exits 1, printing nothing, when there
is none (not Debian, no such entry).

  apt-mirror.py [SOURCES_DIR_ROOT]   (default /, for tests: a tree holding
                                      etc/os-release and etc/apt)
"""
import glob
import os
import sys


def os_release(root):
    fields = {}
    for path in ("etc/os-release", "usr/lib/os-release"):
        try:
            with open(os.path.join(root, path), encoding="utf-8") as f:
                for line in f:
                    key, sep, value = line.strip().partition("=")
                    if sep:
                        fields[key] = value.strip('"')
            return fields
        except OSError:
            continue
    return fields


def one_line_entries(text):
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words or words[0] != "deb":
            continue
        words = words[1:]
        # Options: `[arch=amd64 signed-by=...]`, possibly several words.
        if words and words[0].startswith("["):
            while words and not words[0].endswith("]"):
                words = words[1:]
            words = words[1:]
        if len(words) >= 2:
            yield [words[0]], [words[1]]


def deb822_entries(text):
    for stanza in text.split("\n\n"):
        fields, key = {}, None
        for line in stanza.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line[0] in " \t" and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, value = line.split(":", 1)
                key = key.strip().lower()
                fields[key] = value.strip()
        if fields.get("enabled", "yes").lower() == "no":
            continue
        if "deb" in fields.get("types", "").split():
            yield fields.get("uris", "").split(), fields.get("suites", "").split()


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "/"
    release = os_release(root)
    codename = release.get("VERSION_CODENAME", "")
    if release.get("ID") != "debian" or not codename:
        return 1
    apt = os.path.join(root, "etc/apt")
    files = [os.path.join(apt, "sources.list")]
    files += sorted(
        glob.glob(os.path.join(apt, "sources.list.d", "*.list"))
        + glob.glob(os.path.join(apt, "sources.list.d", "*.sources"))
    )
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        parse = deb822_entries if path.endswith(".sources") else one_line_entries
        for uris, suites in parse(text):
            if codename not in suites:
                continue
            for uri in uris:
                if uri.startswith(("http://", "https://")):
                    print(uri.rstrip("/"))
                    return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
