# shellcheck shell=bash
# SPDX-License-Identifier: BSD-2-Clause
# Shared by tests/launchers/*: a 2-rank shm training job started by a real
# launcher, and the checks of its ranks' JSON summaries.  Sourced.  The
# scripts' exit status: 0 passed, 77 skipped (the reason printed), anything
# else failed (tests/run --scripts counts them).

name=launchers/$(basename "$0")
bin=$(realpath "${SS_BIN:-build/bin/shadowsync}")
examples=6000

# A launcher started inside another job (make check under srun or
# mpirun) would pass its own rank on to ours: train reads SLURM_PROCID
# before OMPI_COMM_WORLD_RANK.  Only the launcher under test may speak.
for v in $(compgen -e); do
	case "$v" in
	SLURM_* | SBATCH_* | SALLOC_* | OMPI_* | PMI_* | PMIX_*) unset "$v" ;;
	esac
done

skip() {
	echo "$name: skipped: $*"
	exit 77
}

fail() {
	echo "$name: FAILED: $*"
	exit 1
}

# need_root WHAT, need_commands PACKAGE COMMAND...: skip when missing.
need_root() {
	[ "$(id -u)" -eq 0 ] || skip "not root ($1)"
}

need_commands() {
	local package=$1 c
	shift
	for c in "$@"; do
		command -v "$c" >/dev/null ||
			skip "$c not found (Debian package $package; tools/install-deps installs it)"
	done
}

# make_data DIR: DIR/train.txt, $examples generated lines.
make_data() {
	"$bin" gen-data --out "$1/train.txt" --examples "$examples" \
		--cardinality 300 >/dev/null || fail "gen-data"
	[ "$(wc -l <"$1/train.txt")" -eq "$examples" ] ||
		fail "gen-data wrote $(wc -l <"$1/train.txt") lines, not $examples"
}

# The training arguments both launchers run, after the peers' options:
# one trainer a rank, small tables, a summary in JSON, a job key of its
# own (its leftovers are removed by that key).
job_key=$((1000 + $$))
train_args() {
	echo "train --data $1/train.txt --transport shm --threads 1 \
--hash-size 4000 --progress 0 --json --job-key $job_key"
}

# json_number FILE KEY: the number after "KEY": in FILE's JSON line.
json_number() {
	grep -o "\"$2\":[0-9.]*" "$1" | head -n 1 | cut -d: -f2
}

# check_summaries LAUNCHER FILE0 FILE1: each rank's standard output holds
# its JSON summary; both ranks of a world of 2, each ran rounds of
# averaging, and their examples add up to the file's.
check_summaries() {
	local launcher=$1 sum=0 r f ex rounds
	shift
	for r in 0 1; do
		f=$1
		shift
		grep -q '^{"rank":' "$f" 2>/dev/null ||
			fail "$launcher: rank $r printed no JSON summary ($f)"
		[ "$(json_number "$f" rank)" = "$r" ] ||
			fail "$launcher: $f is rank $(json_number "$f" rank)'s, not rank $r's: $(cat "$f")"
		[ "$(json_number "$f" world)" = 2 ] ||
			fail "$launcher: rank $r is in a world of $(json_number "$f" world), not 2"
		ex=$(json_number "$f" examples)
		rounds=$(json_number "$f" rounds)
		if [ -z "$ex" ] || [ -z "$rounds" ]; then
			fail "$launcher: rank $r's summary has no examples or rounds: $(cat "$f")"
		fi
		[ "$rounds" -gt 0 ] ||
			fail "$launcher: rank $r ran no rounds of averaging"
		echo "$name: rank $r: $ex examples, $rounds rounds"
		sum=$((sum + ex))
	done
	[ "$sum" -eq "$examples" ] ||
		fail "$launcher: the ranks trained $sum examples, the file has $examples"
}

# cleanup_shm: what this job's ranks may have left in /dev/shm.
cleanup_shm() {
	"$bin" shm-clean --job-key "$job_key" >/dev/null 2>&1 || true
}
