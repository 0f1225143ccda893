#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The desktop integration files, as the build makes them, pass their validators: the desktop
# entry (desktop-file-validate), the AppStream metainfo (appstreamcli validate, offline), and
# the MIME type (update-mime-database builds a database in which *.ptw.json is a profile).
# They agree with each other and with the version. A validator that is not installed is
# skipped, saying so. Usage: desktop_files.sh SOURCE_DIR BUILD_DIR APP_ID VERSION
set -euo pipefail
src=$(cd "$1" && pwd)
gen="$2/packaging/generated"
id=$3
version=$4
desktop="$gen/$id.desktop"
metainfo="$gen/$id.metainfo.xml"
mime="$gen/mime/$id.xml"
skipped=()
fail() {
  echo "FAIL: $*"
  exit 1
}

for f in "$desktop" "$metainfo" "$mime"; do [ -s "$f" ] || fail "$f was not made by the build"; done

if command -v desktop-file-validate >/dev/null; then
  out=$(desktop-file-validate "$desktop" 2>&1) || fail "desktop-file-validate $desktop: $out"
  [ -z "$out" ] || fail "desktop-file-validate $desktop has hints: $out"
else
  skipped+=("desktop-file-validate (desktop-file-utils)")
fi

if command -v appstreamcli >/dev/null; then
  out=$(appstreamcli validate --no-net --pedantic "$metainfo" 2>&1) || fail "appstreamcli validate $metainfo: $out"
else
  skipped+=("appstreamcli (appstream)")
fi

if command -v update-mime-database >/dev/null; then
  db=$(mktemp -d)
  trap 'rm -rf "$db"' EXIT
  mkdir -p "$db/mime/packages"
  cp "$mime" "$db/mime/packages/"
  out=$(update-mime-database -V "$db/mime" 2>&1) || fail "update-mime-database: $out"
  ! grep -qi "error\|warning" <<<"$out" || fail "update-mime-database: $out"
  grep -qx "60:application/x-ptw-profile+json:\*.ptw.json" "$db/mime/globs2" || fail "*.ptw.json is not a profile: $(cat "$db/mime/globs2")"
  grep -q "application/x-ptw-profile+json application/json" "$db/mime/subclasses" || fail "a profile is not a sub-class of JSON"
else
  skipped+=("update-mime-database (shared-mime-info)")
fi

# They agree: the entry opens the type the MIME file defines, launches ptw with the file,
# names the icon by the id; the metainfo launches the entry and has this version's release.
grep -qx "MimeType=application/x-ptw-profile+json;" "$desktop" || fail "the desktop entry does not open profiles"
grep -qx "Exec=ptw %f" "$desktop" || fail "the desktop entry's Exec does not pass the file"
grep -qx "Icon=$id" "$desktop" || fail "the desktop entry's icon is not $id"
grep -q "<launchable type=\"desktop-id\">$id.desktop</launchable>" "$metainfo" || fail "metainfo does not launch $id.desktop"
grep -q "<release version=\"$version\"" "$metainfo" || fail "metainfo has no release $version"
head -n 1 "$gen/changelog" | grep -qF "ptw ($version)" || fail "the changelog's first entry is not $version"
# The icons are PNGs of their size (width and height: bytes 16-23 of the header, big-endian).
for size in 48 128 256; do
  png="$src/packaging/icons/ptw-$size.png"
  read -r w0 w1 w2 w3 h0 h1 h2 h3 < <(od -An -tu1 -j16 -N8 "$png")
  [ $(((w0 << 24) | (w1 << 16) | (w2 << 8) | w3)) -eq "$size" ] && [ $(((h0 << 24) | (h1 << 16) | (h2 << 8) | h3)) -eq "$size" ] ||
    fail "$png is not $size x $size"
done
[ ${#skipped[@]} -eq 0 ] || echo "not checked, not installed (packaging/install-deps.sh installs them): ${skipped[*]}"
echo "desktop files: valid and consistent ($id, $version)"
