#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Renders packaging/icons/ptw.svg into the PNG sizes the package installs in hicolor
# (48, 128 and 256 px). Run after changing the SVG and commit the PNGs; the build does not
# render them, so it needs no SVG renderer. Needs rsvg-convert (librsvg2-bin).
set -euo pipefail
cd "$(dirname "$0")/icons"
for size in 48 128 256; do
  rsvg-convert -w "$size" -h "$size" ptw.svg -o "ptw-$size.png"
done
echo "render-icons: ptw-48.png ptw-128.png ptw-256.png"
