#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs, then runs
#   the lab (build, up) -> lab integration tests (pytest + ansible-runner, from the lab's control namespace), and
#   beside them ansible-lint (production), ansible-test sanity and the unit tests -> molecule.
# Every stage runs even if an earlier one failed (except those that need the lab when it could not start);
# the exit status is non-zero if any stage failed. Root required.
# Once the lab is up, lint, sanity and unit run beside the lab's integration tests, at the lowest CPU and I/O
# priority (nice 19, ionice idle): the lab's tests wait on the lab more than they compute (about 45 % of CI's two
# cores idle), and what they wait for keeps the cores first. Their output follows the integration stage's.
# Env: SPARKFLEET_STAGES="lint sanity unit lab integration molecule" to run a subset.
#      SPARKFLEET_OVERLAP=0 runs lint, sanity and unit first, one after another, before the lab (as before).
#      SPARKFLEET_UNIT_WORKERS=N runs the unit stage on N pytest-xdist workers (default: one per core, CI's machine
#      has 2); SPARKFLEET_UNIT_WORKERS=0 runs it in one process (serially), as before xdist.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
stages=${SPARKFLEET_STAGES:-lint sanity unit lab integration molecule}
out=tests/output
mkdir -p "$out"
rm -f "$out"/junit-*.xml "$out"/stages.txt "$out"/checks.log
failed=0

want() { case " $stages " in *" ${1%%:*} "*) return 0;; esac; return 1; }
stage() {  # stage NAME CMD...
  local name=$1 t0 rc; shift
  want "$name" || return 0
  printf '\n===== stage %s: %s\n' "$name" "$*"
  t0=$(date +%s)
  "$@"; rc=$?
  # one line a stage, in a file: stages that run in the background (checks, below) write theirs too
  printf '%-16s %-6s %5ss\n' "$name" "$([ $rc = 0 ] && echo ok || echo FAILED)" $(( $(date +%s) - t0 )) >> "$out/stages.txt"
  return $rc
}

scripts/bootstrap.sh || exit 1
export PATH=$root/.venv/bin:$PATH

checks() {  # lint, sanity, unit: they need neither the lab nor root's namespaces
  stage lint ansible-lint --nocolor
  stage sanity scripts/sanity.sh
  # tests/lab: the lab's stand-ins (not part of the collection), tested without a running lab.
  # On every core: --dist loadfile keeps a file's tests on one worker, so a module-scoped fixture (the packaging
  # tests' collection build and install) is made once, not once per worker.
  local unit_workers=${SPARKFLEET_UNIT_WORKERS:-$(nproc)} unit_par=()
  [ "$unit_workers" = 0 ] || unit_par=(-n "$unit_workers" --dist loadfile)
  stage unit pytest tests/unit tests/lab -q -p no:cacheprovider "${unit_par[@]}" --junitxml="$out/junit-unit.xml"
}
overlap=${SPARKFLEET_OVERLAP:-1}
if ! want integration; then overlap=0; fi
[ "$overlap" = 1 ] || checks

lab_ok=0
if want lab || want integration || want molecule; then
  if stage lab lab/prepare.sh; then lab_ok=1; fi
fi
checks_pid=
if [ "$overlap" = 1 ]; then
  if [ $lab_ok = 1 ]; then
    printf '\n===== stages lint, sanity, unit: beside the integration stage (nice 19, ionice idle); output: %s\n' \
      "$out/checks.log"
    ( renice -n 19 -p "$BASHPID" >/dev/null; ionice -c 3 -p "$BASHPID" 2>/dev/null; checks ) >"$out/checks.log" 2>&1 &
    checks_pid=$!
  else
    checks   # no lab: nothing to run beside
  fi
fi
if [ $lab_ok = 1 ]; then
  # Tests marked `long` exceed CI's budget: scripts/faults.sh runs them with the rest of the fault suite.
  stage integration lab/labctl ctl -- pytest tests/integration -m "lab and not long" -q -p no:cacheprovider \
    --junitxml="$out/junit-integration.xml"
fi
if [ -n "$checks_pid" ]; then
  wait "$checks_pid"
  printf '\n===== the output of lint, sanity and unit (run beside the integration stage)\n'
  cat "$out/checks.log"
fi
if [ $lab_ok = 1 ]; then
  # The default scenario (every role, on the lab) takes the lab down. The role scenarios (each role alone on the
  # running lab, about 6 minutes) exceed CI's budget: scripts/faults.sh runs them; SPARKFLEET_MOLECULE="gpu_cleanup
  # model_sync ray_cluster vllm_serve healthcheck default" runs them here too (the default one last).
  for s in ${SPARKFLEET_MOLECULE:-default}; do
    want molecule && stage "molecule:$s" lab/labctl ctl -- molecule test -s "$s"
  done
fi
want lab && lab/labctl down >/dev/null 2>&1

printf '\n===== summary\n'
[ -f "$out/stages.txt" ] && cat "$out/stages.txt"
grep -q ' FAILED ' "$out/stages.txt" 2>/dev/null && failed=1
# One closing line with the pytest counts of every run above.
python3 - "$out"/junit-*.xml <<'PY'
import sys, xml.etree.ElementTree as ET
p = f = s = 0
failed = []
for path in sys.argv[1:]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        continue
    for ts in ([root] if root.tag == "testsuite" else root.iter("testsuite")):
        t, e, fl, sk = (int(ts.get(k, 0)) for k in ("tests", "errors", "failures", "skipped"))
        p += t - e - fl - sk; f += e + fl; s += sk
        for case in ts.iter("testcase"):
            bad = case.find("failure")
            bad = case.find("error") if bad is None else bad
            if bad is not None:  # the failed tests by name, so that a log's tail says which
                first = (bad.get("message") or "").strip().splitlines()[:1]
                failed.append("FAILED %s::%s  %s" % (case.get("classname"), case.get("name"), (first or [""])[0][:160]))
if failed:
    print("\n".join(failed))
print("pytest: %d passed, %d failed, %d skipped" % (p, f, s))
PY
exit $failed
