#!/usr/bin/env bash
# MPICH's collective test suite (test/mpi/coll of an MPICH source tree,
# unchanged), run under Open MPI without libchorus_pmpi and with it, to show
# that nothing passing without the library fails with it. Not part of the
# CI suite (it needs MPICH's sources and takes about half an hour on two
# cores); docs/mpi.md has the last results. Usage:
#
#   # MPICH's sources, from Debian's archive (the same tarball as apt's mpich):
#   curl -O http://deb.debian.org/debian/pool/main/m/mpich/mpich_4.0.2.orig.tar.xz
#   tar -xJf mpich_4.0.2.orig.tar.xz mpich-4.0.2/test/mpi
#   cd mpich-4.0.2/test/mpi
#   ./configure --with-mpi=/usr --enable-fortran=none --disable-cxx --disable-romio \
#       --disable-spawn --enable-threads=single --enable-strictmpi
#   # Open MPI 4.1 hides the MPI-1 functions dtpools still calls:
#   for d in dtpools util coll; do make -k -C $d CFLAGS="-O2 -DOMPI_OMIT_MPI1_COMPAT_DECLS=0"; done
#   cd -
#   tests/mpi/run_mpich_coll_suite.sh mpich-4.0.2/test/mpi/coll build/src/libchorus_pmpi.so results.txt
#
# Each test of coll/testlist that built runs at its listed rank count, at
# most CHORUS_SUITE_MAX_RANKS (4: two cores), three ways: Open MPI alone,
# with the library (default threshold), and with CHORUS_MPI_MIN_BYTES=0
# (every call Chorus can take); CHORUS_SUITE_WAYS picks some ("mpi chorus_all").
# A run passes when it exits 0 and prints MPICH's " No Errors". Results: one
# line per test and way; a summary last.
set -u
coll=${1:?"usage: $0 MPICH_TEST_MPI_COLL_DIR LIBCHORUS_PMPI RESULTS_FILE"}
library=$(realpath "${2:?missing the path of libchorus_pmpi.so}")
results=${3:?missing the results file}
max_ranks=${CHORUS_SUITE_MAX_RANKS:-4}
ways=${CHORUS_SUITE_WAYS:-mpi chorus chorus_all}
limit=${CHORUS_SUITE_TIMEOUT:-180}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 CHORUS_SOCKET_ADDR=127.0.0.1
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-60}
: > "$results"
declare -A outcome
while read -r name ranks rest; do
  case "$name" in ''|'#'*) continue ;; esac
  [ -x "$coll/$name" ] || continue
  args=()
  for word in $rest; do
    case "$word" in arg=*) args+=("${word#arg=}") ;; esac
  done
  # Tests that need a feature this MPI lacks say so in the testlist.
  case "$rest" in *mpiversion=4*|*xfail=*|*strict=false*) continue ;; esac
  np=$((ranks < max_ranks ? ranks : max_ranks))
  for way in $ways; do
    preload=()
    case $way in
      chorus) preload=(-x LD_PRELOAD="$library") ;;
      chorus_all) preload=(-x LD_PRELOAD="$library" -x CHORUS_MPI_MIN_BYTES=0) ;;
    esac
    start=$(date +%s.%N)
    out=$(cd "$coll" && timeout "$limit" mpirun --oversubscribe -np "$np" "${preload[@]}" \
            "./$name" "${args[@]}" 2>&1 < /dev/null)
    rc=$?
    seconds=$(echo "$(date +%s.%N) - $start" | bc)
    verdict=fail
    [ $rc -eq 0 ] && grep -q "No Errors" <<<"$out" && verdict=pass
    [ $rc -eq 124 ] && verdict=timeout
    noise=$(grep -cE "UCX +(WARN|ERROR)|mm_(sysv|posix)|shmat" <<<"$out")
    printf '%-28s np=%d (of %d) %-10s %-7s %6.1f s  ucx_lines=%d\n' "$name ${args[*]}" "$np" "$ranks" "$way" \
      "$verdict" "$seconds" "$noise" | tee -a "$results"
    if [ "$verdict" != pass ]; then
      { echo "---- $name ${args[*]} ($way) output:"; head -c 2000 <<<"$out"; echo; } >> "$results.log"
    fi
    outcome["$name ${args[*]} np=$np (of $ranks) $way"]=$verdict
  done
done < "$coll/testlist"
{
  echo "---- summary"
  for way in $ways; do
    total=0 passed=0
    for key in "${!outcome[@]}"; do
      [[ $key == *" $way" ]] || continue
      total=$((total + 1))
      [ "${outcome[$key]}" = pass ] && passed=$((passed + 1))
    done
    echo "$way: $passed of $total passed"
  done
  echo "passed with MPI alone but not with the library:"
  for key in "${!outcome[@]}"; do
    [[ $key == *" mpi" ]] || continue
    base=${key% mpi}
    [ "${outcome[$key]}" = pass ] || continue
    for way in chorus chorus_all; do
      [ -z "${outcome[$base $way]+set}" ] || [ "${outcome[$base $way]}" = pass ] ||
        echo "  $base ($way: ${outcome[$base $way]})"
    done
  done
  echo "failed with MPI alone, passed with the library (every call on Chorus):"
  for key in "${!outcome[@]}"; do
    [[ $key == *" mpi" ]] || continue
    base=${key% mpi}
    [ "${outcome[$key]}" != pass ] && [ "${outcome[$base chorus_all]:-}" = pass ] && echo "  $base"
  done
} | tee -a "$results"
