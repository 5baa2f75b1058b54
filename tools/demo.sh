#!/usr/bin/env bash
# The main job, from nothing: install missing packages, build (Release), analyse the default
# model (MaxText's published setting) for three targets, llama3.1-405b and a `precast fit`, then
# compile a small default-family model (about 8M parameters) for this CPU and train it for 60
# steps with precast-run, then tokenize Debian's fortunes and train a byte-level model on them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/setup.sh"
dir=$("$root/tools/build.sh" Release | tail -n 1)
precast="$dir/tools/precast/precast"

run() {
  echo
  echo "\$ precast $*"
  local rc=0
  "$precast" "$@" || rc=$?
  # Exit 3 is an answer (the step does not fit; the report says why), not a failure.
  if [ "$rc" -eq 3 ]; then echo "(exit 3: does not fit)"; elif [ "$rc" -ne 0 ]; then exit "$rc"; fi
}

common=(configs/base.yml per_device_batch_size=1 max_target_length=2048)
cd "$root"
run analyze "${common[@]}" compile_topology=v5p-128
run analyze "${common[@]}" compile_topology=v6e-32 ici_fsdp_parallelism=32
run analyze "${common[@]}" compile_topology=cpu-4
run analyze configs/base.yml model_name=llama3.1-405b compile_topology=v5p-1024 \
  per_device_batch_size=2 max_target_length=8192 --timing
run fit configs/base.yml model_name=llama2-70b compile_topology=v5p-128

# Compile for this CPU, then train with the separate runtime: the loss falls as the model
# memorises MaxText's synthetic batch.
demo=(configs/base.yml base_emb_dim=256 base_num_decoder_layers=4 base_num_query_heads=4
  base_num_kv_heads=4 head_dim=64 base_mlp_dim=768 vocab_size=8192 per_device_batch_size=8
  max_target_length=256 dtype=float32 compile_topology=cpu-1)
artifact="$dir/demo.pcx"
echo
echo "\$ precast compile ${demo[*]} compiled_trainstep_file=$artifact"
"$precast" compile "${demo[@]}" compiled_trainstep_file="$artifact" | tail -n 6
echo
echo "\$ precast-run $artifact steps=60 learning_rate=1e-3"
"$dir/tools/precast-run/precast-run" "$artifact" steps=60 learning_rate=1e-3

# Train on text: Debian's fortunes (the plain files; each %-separated entry one document),
# byte-level tokens. The unigram entropy is what a model ignoring context reaches; the train loss
# and the eval loss on the held-out fortunes (every 20th, never trained on) fall well below it as
# the model learns words. Then a sample from the trained model: greedy decoding of this small
# byte-level model loops on "the the the ...", so the sample draws (MaxText's decode keys) from
# the 10 likeliest bytes at temperature 0.7, seed 1234: the same text every run. About 2.5
# minutes on 2 cores (evaluation and the sample add about half a minute).
fortunes=()
for f in /usr/share/games/fortunes/*; do
  case "$f" in *.dat | *.u8) continue ;; esac
  if [ -f "$f" ]; then fortunes+=("$f"); fi
done
tokens="$dir/fortunes.tokens"
echo
echo "\$ precast tokenize /usr/share/games/fortunes/<${#fortunes[@]} text files> -o $tokens --separator=%"
"$precast" tokenize "${fortunes[@]}" -o "$tokens" --separator=% | tee "$dir/tokenize.txt"
entropy=$(sed -n 's/.* bits = \([0-9.]*\) nats per token/\1/p' "$dir/tokenize.txt")
# eval_interval and sample_tokens at compile time add the eval_step and sample_step entry points.
text=(configs/base.yml base_emb_dim=128 base_num_decoder_layers=2 base_num_query_heads=4
  base_num_kv_heads=4 head_dim=32 base_mlp_dim=512 vocab_size=259 per_device_batch_size=8
  max_target_length=256 dtype=float32 compile_topology=cpu-1 eval_interval=50 sample_tokens=80)
echo
echo "\$ precast compile ${text[*]} compiled_trainstep_file=$dir/fortunes.pcx"
"$precast" compile "${text[@]}" compiled_trainstep_file="$dir/fortunes.pcx" | tail -n 3
echo
echo "\$ precast-run $dir/fortunes.pcx steps=201 learning_rate=3e-3 dataset_type=tokens dataset_path=$tokens eval_interval=50 eval_steps=20 sample_prompt='Q: ' sample_tokens=80 decode_sampling_strategy=topk decode_sampling_top_k=10 decode_sampling_temperature=0.7"
"$dir/tools/precast-run/precast-run" "$dir/fortunes.pcx" steps=201 learning_rate=3e-3 \
  dataset_type=tokens dataset_path="$tokens" eval_interval=50 eval_steps=20 \
  sample_prompt='Q: ' sample_tokens=80 decode_sampling_strategy=topk decode_sampling_top_k=10 \
  decode_sampling_temperature=0.7 >"$dir/fortunes.log"
grep -E '^(Dataset|Eval data|Completed eval after|Sample|completed step: (0|25|50|75|100|125|150|175|200),)' \
  "$dir/fortunes.log"
awk -v entropy="$entropy" '/^completed step: / {
    loss = $0; sub(/.*, loss: /, "", loss); sub(/,.*/, "", loss); losses[n++] = loss }
  /^Completed eval after train step / {
    eval_loss = $0; sub(/.*, loss=/, "", eval_loss); sub(/,.*/, "", eval_loss) }
  END { for (i = n - 20; i < n; ++i) sum += losses[i]
    printf "Unigram entropy of the text: %.3f nats per token; mean train loss of the last 20 " \
           "steps: %.3f nats (%.0f%% of it); eval loss after the last step: %.3f nats (%.0f%% of " \
           "it)\n", entropy, sum / 20, 100 * sum / 20 / entropy, eval_loss, 100 * eval_loss / entropy }' \
  "$dir/fortunes.log"
