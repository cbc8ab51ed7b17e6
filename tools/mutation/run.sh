#!/usr/bin/env bash
# Mutation testing with cosmic-ray (in place: each mutant is written into the source
# file, the module's fastest tests run, the file is restored). One module at a time:
#   nice -n 19 bash tools/mutation/run.sh sampling      # formats | tokenizer | sampling | generation | scheduler
#   MUTATION_SAMPLE=40 nice -n 19 bash tools/mutation/run.sh sampling   # a seeded sample of 40 mutants
#   MUTATION_TIMEOUT=20: seconds before a mutant counts as killed by a hang (default 120)
# Results: out/mutation/MODULE.sqlite and MODULE.txt (cr-report: each mutant's outcome,
# the survivors first in the summary). The scores and each survivor's reason: docs/TESTING.md.
# Do not edit or commit the mutated module while a run is going.
set -euo pipefail
cd "$(dirname "$0")/../.."
source ci/uv.sh
ensure_uv
module=${1:?usage: tools/mutation/run.sh MODULE}
src=packages/bitnet-core/src/bitnet_core
t=packages/bitnet-core/tests
case "$module" in
  formats)    path=$src/formats;              tests="$t/test_formats_codecs.py $t/test_formats_quantize.py $t/test_native_unpack.py" ;;
  tokenizer)  path=$src/tokenizer;            tests="$t/test_tokenizer.py $t/test_tokenizer_hf.py $t/test_text_pieces.py" ;;
  sampling)   path=$src/model/sampling.py;    tests="$t/test_sampling.py" ;;
  generation) path=$src/model/generation.py;  tests="$t/test_device_tokens.py $t/test_generation_text.py $t/test_model_api.py $t/test_structured.py" ;;
  scheduler)  path=$src/server/scheduler.py;  tests="$t/test_scheduler.py" ;;
  *) echo "unknown module $module" >&2; exit 2 ;;
esac
out=out/mutation
mkdir -p "$out"
cfg=$out/$module.toml
cat > "$cfg" <<TOML
[cosmic-ray]
module-path = "$path"
timeout = ${MUTATION_TIMEOUT:-120}.0
excluded-modules = []
test-command = "$PWD/.venv/bin/python -m pytest -x -q -p no:cacheprovider -p no:randomly $tests"

[cosmic-ray.distributor]
name = "local"
TOML
cr() { "$UV" run --no-sync --with cosmic-ray==8.7.0 "$@"; }
if [ ! -f "$out/$module.sqlite" ]; then
  cr cosmic-ray init "$cfg" "$out/$module.sqlite"
  # MUTATION_SAMPLE=N: a seeded sample of N mutants (a module has hundreds, 10-20 s each)
  [ -z "${MUTATION_SAMPLE:-}" ] || .venv/bin/python tools/mutation/sample.py "$out/$module.sqlite" "$MUTATION_SAMPLE"
fi
cr cosmic-ray exec "$cfg" "$out/$module.sqlite"
cr cr-report "$out/$module.sqlite" --show-pending > "$out/$module.txt" || true
git diff --quiet -- "$path" || { echo "error: $path is still mutated; git checkout it" >&2; exit 1; }
tail -4 "$out/$module.txt"
