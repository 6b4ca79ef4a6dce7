#!/usr/bin/env python3
"""Edit a dtrain checkpoint manifest (tests only).

usage: manifest_edit.py MANIFEST check            the stored manifest_crc32 matches our canonical text
       manifest_edit.py MANIFEST set PATH JSON [--no-reseal]
           set a field (PATH: /-separated, e.g. sampler/position or rng/0) to a JSON
           value and store a fresh manifest_crc32 (unless --no-reseal), as an
           editor who knows the checksum rule would

The checksum is the CRC-32 (zlib) of the manifest without manifest_crc32,
printed as compact JSON (cJSON_PrintUnformatted), as src/ckpt/manifest.c does.
"""
import json
import sys
import zlib


def canonical_crc(m):
    body = {k: v for k, v in m.items() if k != "manifest_crc32"}
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return "%08x" % (zlib.crc32(text.encode()) & 0xffffffff)


def main():
    path, what = sys.argv[1], sys.argv[2]
    m = json.load(open(path))
    if what == "check":
        ok = canonical_crc(m) == m.get("manifest_crc32")
        print("manifest_crc32", m.get("manifest_crc32"), "ours", canonical_crc(m))
        sys.exit(0 if ok else 1)
    field, value = sys.argv[3], json.loads(sys.argv[4])
    obj, keys = m, field.split("/")
    for k in keys[:-1]:
        obj = obj[int(k)] if isinstance(obj, list) else obj[k]
    last = keys[-1]
    if isinstance(obj, list):
        obj[int(last)] = value
    else:
        obj[last] = value
    if "--no-reseal" not in sys.argv:
        m["manifest_crc32"] = canonical_crc(m)
    with open(path, "w") as f:
        json.dump(m, f, indent=1)


if __name__ == "__main__":
    main()
