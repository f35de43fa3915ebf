#!/usr/bin/env bash
# Refresh the uPlot files the HTML report inlines, from the npm package (npm checks its integrity).
set -euo pipefail
version=${1:?usage: vendor-uplot.sh VERSION}
dest="$(cd "$(dirname "$0")/.." && pwd)/agent/gpufleet/report/html/vendor"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "uplot@$version" >/dev/null && tar xzf "uplot-$version.tgz")
cp "$tmp/package/dist/uPlot.iife.min.js" "$tmp/package/dist/uPlot.min.css" "$dest/"
cp "$tmp/package/LICENSE" "$dest/uPlot.LICENSE"
(cd "$dest" && sha256sum uPlot.iife.min.js uPlot.min.css)
echo "update the version and sha256 in $dest/README.md and tests/unit/test_report_page.py"
