#!/usr/bin/env bash
# Push and pull throughput of one large artifact (default 1 GiB) against a local S3-compatible
# server (moto, `pip install 'moto[server]'`) and a shared directory, each with a baseline
# measured in the same run on the same file:
#   s3://    cwm push / pull   vs  boto3 upload_file / get_object streamed to a file (moto
#            depends on boto3)
#   file://  cwm push / pull   vs  cp
#
#   cargo build --release && bash benches/remote_throughput.sh        # SIZE_MIB=256 for less
#
# Prints one line per transfer: seconds, MiB/s, and the ratio cwm / baseline in MiB/s.
set -euo pipefail
cd "$(dirname "$0")/.."
CWM=${CWM:-$PWD/target/release/cwm}
SIZE_MIB=${SIZE_MIB:-1024}
[ -x "$CWM" ] || { echo "build cwm first: cargo build --release" >&2; exit 2; }
python3 -c "import moto.server, boto3" 2>/dev/null || { echo "needs moto[server] and boto3" >&2; exit 2; }

work=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m moto.server -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
moto=$!
trap 'kill $moto 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null && break
  sleep 0.2
done
export AWS_ENDPOINT="http://127.0.0.1:$port" AWS_ALLOW_HTTP=true AWS_REGION=us-east-1 \
  AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret
python3 - <<EOF
import boto3
boto3.client("s3", endpoint_url="$AWS_ENDPOINT", region_name="us-east-1").create_bucket(Bucket="cwm-bench")
EOF

now() { date +%s.%N; }
sub() { python3 -c "print($1 - $2)"; }
report() { # label seconds baseline_seconds
  python3 -c "
size = $SIZE_MIB
t, b = $2, $3
print(f'{\"$1\":<14} {t:7.2f} s  {size / t:8.1f} MiB/s   baseline {b:7.2f} s  {size / b:8.1f} MiB/s   ratio {b / t:5.2f}x')"
}

mkdir -p "$work/a" "$work/b"
cat >"$work/a/pipeline.yaml" <<EOF
stages:
  big:
    uses: command
    params:
      cmd: head -c \$((CWM_PARAM_mib * 1048576)) /dev/urandom > "\$CWM_OUT/big.bin"
      mib: $SIZE_MIB
EOF
cp "$work/a/pipeline.yaml" "$work/b/pipeline.yaml"
(cd "$work/a" && "$CWM" run >/dev/null)
file=$(ls "$work"/a/artifacts/objects/*/data/big.bin)
echo "artifact: $(du -h "$file" | cut -f1), moto on port $port"

for remote in s3 file; do
  if [ $remote = s3 ]; then url="s3://cwm-bench/cwm"; else url="file://$work/remote"; fi
  rm -rf "$work/b/artifacts" "$work/b/cwm.lock"
  t0=$(now); (cd "$work/a" && "$CWM" push --remote "$url" >/dev/null); t1=$(now)
  cp "$work/a/cwm.lock" "$work/b/cwm.lock"
  t2=$(now); (cd "$work/b" && "$CWM" pull --remote "$url" >/dev/null); t3=$(now)
  (cd "$work/b" && "$CWM" verify | grep -q "0 corrupt") || { echo "pulled artifact does not verify" >&2; exit 1; }
  if [ $remote = s3 ]; then
    b0=$(now)
    python3 -c "import boto3; boto3.client('s3', endpoint_url='$AWS_ENDPOINT', region_name='us-east-1').upload_file('$file', 'cwm-bench', 'baseline/big.bin')"
    b1=$(now)
    # One streamed GET, as cwm does (boto3's download_file splits it into ranged GETs,
    # which moto serves slowly: 90 s instead of 2.3 s for 1 GiB in one run here).
    python3 - <<EOF
import boto3, shutil
body = boto3.client("s3", endpoint_url="$AWS_ENDPOINT", region_name="us-east-1").get_object(Bucket="cwm-bench", Key="baseline/big.bin")["Body"]
with open("$work/baseline.bin", "wb") as out:
    shutil.copyfileobj(body, out, 1 << 20)
EOF
    b2=$(now)
  else
    b0=$(now); cp "$file" "$work/copy.bin"; sync "$work/copy.bin"; b1=$(now)
    cp "$work/copy.bin" "$work/baseline.bin"; sync "$work/baseline.bin"; b2=$(now)
  fi
  rm -f "$work/baseline.bin" "$work/copy.bin"
  report "$remote push" "$(sub $t1 $t0)" "$(sub $b1 $b0)"
  report "$remote pull" "$(sub $t3 $t2)" "$(sub $b2 $b1)"
done
