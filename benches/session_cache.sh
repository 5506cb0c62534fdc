#!/usr/bin/env bash
# A cache folder kept from one lent GPU session to the next (benches/gpu_session.sh): packed into
# the folder a lent machine sends back, within what comes back from there (eight files, none
# over 16 MiB), and unpacked from what the next call brings.
#
#   benches/session_cache.sh pack FOLDER OUT NAME
#   benches/session_cache.sh unpack FOLDER ARCHIVE
#
# pack: FOLDER as OUT/NAME (tar, xz -3), or, when that is over PART_MIB (15) MiB, as parts
# OUT/NAME.0, OUT/NAME.1, ... of PART_MIB MiB each; any earlier OUT/NAME or parts of it are
# removed first. If OUT would then hold more than MAX_FILES (8) files, the new ones are removed
# again. Prints what it left in OUT, or why nothing; an empty or missing FOLDER packs to nothing.
#
# unpack: ARCHIVE, or its parts ARCHIVE.0, ARCHIVE.1, ... in order, into FOLDER, unless FOLDER
# is there already (the machine kept it from an earlier call). Prints what it did; an archive
# that does not unpack leaves no FOLDER behind (a half-written database would be worse than
# none). On this side, `cat NAME.? > NAME` joins the parts that came back.
set -euo pipefail

usage() {
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2
  exit 2
}

PART_MIB=${PART_MIB:-15}
MAX_FILES=${MAX_FILES:-8}

# The parts of ARCHIVE in their order (NAME.0, NAME.1, ..., NAME.10, ...).
parts_of() {
  find "$(dirname "$1")" -maxdepth 1 -type f -name "$(basename "$1").[0-9]*" | sort -V
}

pack() {
  local folder=$1 out=$2 name=$3 whole=$2/$3 files
  local -a parts
  if [ -z "$(ls -A "$folder" 2>/dev/null)" ]; then
    echo "$name: nothing to pack ($folder is empty or missing)"
    return 0
  fi
  mapfile -t parts < <(parts_of "$whole")
  rm -f "$whole" "$whole.part" "${parts[@]}"
  tar -C "$folder" -cf - . | xz -T0 -3 >"$whole.part"
  if [ "$(stat -c %s "$whole.part")" -gt $((PART_MIB * 1048576)) ]; then
    split -b "${PART_MIB}M" -d -a 1 "$whole.part" "$whole."
    rm "$whole.part"
  else
    mv "$whole.part" "$whole"
  fi
  mapfile -t parts < <(if [ -f "$whole" ]; then echo "$whole"; else parts_of "$whole"; fi)
  files=$(find "$out" -maxdepth 1 -type f | wc -l)
  if [ "$files" -gt "$MAX_FILES" ]; then
    rm -f "${parts[@]}"
    echo "$name: left out, $files files would be more than the $MAX_FILES that come back"
    return 0
  fi
  echo "$name: $(du -sh "$folder" | cut -f1) packed in ${#parts[@]} file(s) of" \
    "$(du -cb "${parts[@]}" | tail -1 | cut -f1) bytes"
}

unpack() {
  local folder=$1 archive=$2
  local -a parts
  if [ -d "$folder" ]; then
    echo "$(basename "$folder"): kept from an earlier call ($(du -sh "$folder" | cut -f1))"
    return 0
  fi
  if [ -f "$archive" ]; then
    parts=("$archive")
  else
    mapfile -t parts < <(parts_of "$archive")
  fi
  if [ "${#parts[@]}" -eq 0 ]; then
    echo "$(basename "$folder"): none brought ($archive), starting empty"
    return 0
  fi
  mkdir -p "$folder"
  if cat "${parts[@]}" | tar -xJf - -C "$folder"; then
    echo "$(basename "$folder"): unpacked from ${#parts[@]} file(s): $(du -sh "$folder" | cut -f1)"
  else
    rm -rf "$folder"
    echo "$(basename "$folder"): $archive did not unpack; starting empty"
  fi
}

case ${1:-} in
  pack) [ $# -eq 4 ] || usage; pack "$2" "$3" "$4" ;;
  unpack) [ $# -eq 3 ] || usage; unpack "$2" "$3" ;;
  *) usage ;;
esac
