#!/usr/bin/env bash
# Pins every base image of the repository's Dockerfiles by digest: each
# `FROM image:tag` or `FROM image:tag@sha256:…` (a PLACEHOLDER, or an older
# pin) gets the digest that image:tag names in its registry now, the digest of
# the multi-platform index. Stage names (`FROM build`, `FROM run-${VARIANT}`)
# carry no tag and are left alone.
#
#   scripts/pin-images.sh          # Dockerfile and deploy/vllm/Dockerfile
#   scripts/pin-images.sh FILE...  # only these
#
# Needs Docker with buildx and network (it asks the registries, pulls nothing).
# Review the diff and commit it; run it again to take newer bases (security
# fixes in distroless or Go's image), then rebuild and test the image.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -gt 0 ]; then files=("$@"); else files=(Dockerfile deploy/vllm/Dockerfile); fi
if ! docker buildx version >/dev/null 2>&1; then
	echo "pin-images.sh: needs docker with buildx (docker buildx imagetools inspect)" >&2
	exit 1
fi
# FROM [--platform=…] image:tag[@sha256:…] [AS name]; group 3 is image:tag.
from='^(FROM[[:space:]]+(--[^[:space:]]+[[:space:]]+)*)([^[:space:]@$]+:[^[:space:]@/$]+)(@sha256:[^[:space:]]*)?([[:space:]].*)?$'
for f in "${files[@]}"; do
	for ref in $(sed -nE "s#${from}#\3#p" "$f" | sort -u); do
		digest=$(docker buildx imagetools inspect --format '{{.Manifest.Digest}}' "$ref")
		if ! [[ $digest =~ ^sha256:[0-9a-f]{64}$ ]]; then
			echo "pin-images.sh: $f: $ref: registry answered ${digest@Q}, not a digest" >&2
			exit 1
		fi
		re=${ref//./\\.} # an image reference's only regex character is the dot
		sed -i -E "s#^(FROM[[:space:]]+(--[^[:space:]]+[[:space:]]+)*)${re}(@sha256:[^[:space:]]*)?([[:space:]]|\$)#\1${ref}@${digest}\4#" "$f"
		echo "$f: $ref@$digest"
	done
done
