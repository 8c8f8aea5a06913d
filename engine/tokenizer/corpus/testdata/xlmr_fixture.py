"""Builds the XLM-RoBERTa fixtures: no registry package ships an XLM-R
tokenizer.json, so one is made the way the real ones were made.

    python xlmr_fixture.py tokenizer OUT_DIR
    python xlmr_fixture.py model TOKENIZER_DIR OUT_DIR
    python xlmr_fixture.py reranker TOKENIZER_DIR OUT_DIR

tokenizer: trains a SentencePiece unigram model (nmt_nfkc normalization, as
XLM-R's) on a multilingual corpus built here, deterministically (fixed seed,
one thread, no sampling of the input), then converts it with transformers:
OUT_DIR/tokenizer.json and tokenizer_config.json are what
XLMRobertaTokenizer.from_pretrained makes of the sentencepiece.bpe.model file
(kept beside them), and OUT_DIR/converter/tokenizer.json is what
transformers' XLMRobertaConverter (convert_slow_tokenizer) writes, with its
Strip and Replace normalizers after the Precompiled one.

model: a random-weight XLMRobertaModel (torch seed 21, small sizes, the
padding_idx 1 position offset of XLM-R) in the sentence-transformers layout
of intfloat/multilingual-e5-small (mean pooling, Normalize, 512 tokens), with
the tokenizer of TOKENIZER_DIR.

reranker: a random-weight XLMRobertaForSequenceClassification with one
label (torch seed 22; bge-reranker-v2-m3's architecture, small) as
sentence-transformers' CrossEncoder saves it (sigmoid activation), with the
tokenizer of TOKENIZER_DIR.
"""

import json
import os
import random
import shutil
import sys
import tempfile
import unicodedata

SEED = 2026

# A few sentences per language, recombined below.
PHRASES = {
    "en": ["The quick brown fox jumps over the lazy dog.", "Embeddings measure how close two sentences are in meaning.",
           "It's a well-known fact that retrieval works better with good chunks.", "I can't believe they've done it again!"],
    "de": ["Der schnelle braune Fuchs springt über den faulen Hund.", "Straßenbahnen fahren durch die Königstraße.",
           "Größere Änderungen würden übermäßig viel Zeit kosten."],
    "fr": ["Le renard brun rapide saute par-dessus le chien paresseux.", "L'été dernier, nous sommes allés à côté de l'église.",
           "Où est la bibliothèque ? Voilà, c'est ça : très simple !"],
    "es": ["El rápido zorro marrón salta sobre el perro perezoso.", "¿Verdad? ¡Claro! El niño tiene un año.",
           "La educación pública es muy importante para la nación."],
    "pt": ["A raposa marrom rápida pula sobre o cão preguiçoso.", "Não sei se você já ouviu falar da informação."],
    "it": ["La volpe marrone veloce salta sopra il cane pigro.", "Perché è così difficile? Più tardi, per favore."],
    "pl": ["Szybki brązowy lis przeskakuje nad leniwym psem.", "Zażółć gęślą jaźń, łódź płynie."],
    "tr": ["Hızlı kahverengi tilki tembel köpeğin üzerinden atlar.", "İstanbul'da güneşli bir gün, ağaçlar yeşil."],
    "vi": ["Con cáo nâu nhanh nhẹn nhảy qua con chó lười.", "Tiếng Việt có rất nhiều dấu thanh điệu."],
    "ru": ["Быстрая коричневая лиса прыгает через ленивую собаку.", "Мы смотрим на звёзды и ищем ответы."],
    "uk": ["Швидка бура лисиця стрибає через ледачого пса.", "Їжак і ґудзик — це українські слова."],
    "el": ["Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο.", "Καλημέρα, τι κάνεις σήμερα;"],
    "ar": ["الثعلب البني السريع يقفز فوق الكلب الكسول.", "مرحبا بكم في عالم البحث عن المعلومات."],
    "he": ["השועל החום המהיר קופץ מעל הכלב העצלן.", "שלום עולם, מה שלומך היום?"],
    "hi": ["तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।", "हम आज सदिश खोज के बारे में सीखेंगे।"],
    "bn": ["দ্রুত বাদামী শিয়াল অলস কুকুরের উপর দিয়ে লাফ দেয়।"],
    "th": ["สุนัขจิ้งจอกสีน้ำตาลกระโดดข้ามสุนัขขี้เกียจ", "วันนี้อากาศดีมาก"],
    "zh": ["敏捷的棕色狐狸跳过了懒狗。", "我们今天学习向量检索和语义搜索。", "北京是中华人民共和国的首都。"],
    "ja": ["素早い茶色の狐が怠け者の犬を飛び越える。", "カタカナとひらがなと漢字を使います。", "東京タワーは高いです。"],
    "ko": ["빠른 갈색 여우가 게으른 개를 뛰어넘는다.", "오늘 날씨가 정말 좋네요."],
    "sw": ["Mbweha mwepesi wa kahawia anaruka juu ya mbwa mvivu."],
}

EMOJI = ["😀", "👍🏽", "🚀", "❤️", "🎉", "👨‍👩‍👧", "🇫🇷", "🔥", "🤖", "✨", "🙏🏿", "👩🏻‍💻", "☕", "⚽"]

# Characters that nmt_nfkc rewrites: compatibility forms, full-width
# letters, ligatures, circled numbers, odd spaces.
COMPAT = ["ﬁ", "ﬂ", "①", "②", "⑩", "½", "¼", "㎏", "㎞", "™", "ℌ", "ℍ", "Ⅷ", "ｶﾀｶﾅ", "Ｆｕｌｌ", "ｗｉｄｔｈ", "１２３",
          "x²", "H₂O", "…", "‼", "\u00a0", "\u3000", "\u2009", "µ", "Å", "ǅ", "㍿", "＠", "！", "？"]


def script_word(rng):
    """A random word of one script's letters."""
    ranges = [(0x61, 0x7A), (0xC0, 0x17F), (0x391, 0x3C9), (0x410, 0x44F), (0x5D0, 0x5EA), (0x627, 0x64A),
              (0x905, 0x939), (0xE01, 0xE2E), (0x3041, 0x3096), (0x30A1, 0x30FA), (0x4E00, 0x4FFF), (0xAC00, 0xAD00)]
    lo, hi = rng.choice(ranges)
    return "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 7)))


def corpus():
    rng = random.Random(SEED)
    lines = []
    # English prose and code vocabulary from the standard library's own
    # documentation.
    import inspect
    import importlib
    for name in sorted(["argparse", "asyncio", "collections", "csv", "datetime", "decimal", "email", "functools",
                        "http.client", "inspect", "itertools", "json", "logging", "os", "pathlib", "random", "re",
                        "shutil", "sqlite3", "string", "subprocess", "textwrap", "threading", "typing", "unittest",
                        "urllib.parse", "zipfile"]):
        mod = importlib.import_module(name)
        docs = [inspect.getdoc(mod) or ""]
        for attr in sorted(dir(mod)):
            if not attr.startswith("_"):
                docs.append(inspect.getdoc(getattr(mod, attr, None)) or "")
        for d in docs:
            lines += [ln.strip() for ln in d.splitlines() if ln.strip()]
    lines = sorted(set(lines))
    # Multilingual text: phrases recombined, with emoji, compatibility
    # characters and decomposed accents.
    langs = sorted(PHRASES)
    for i in range(30000):
        parts = []
        for _ in range(rng.randint(1, 4)):
            kind = rng.random()
            if kind < 0.6:
                parts.append(rng.choice(PHRASES[rng.choice(langs)]))
            elif kind < 0.75:
                parts.append(" ".join(script_word(rng) for _ in range(rng.randint(1, 5))))
            elif kind < 0.85:
                parts.append(rng.choice(EMOJI) * rng.randint(1, 2))
            elif kind < 0.95:
                parts.append(rng.choice(COMPAT))
            else:
                parts.append(str(rng.randint(0, 10**rng.randint(1, 9))))
        line = " ".join(parts)
        if rng.random() < 0.1:
            line = unicodedata.normalize("NFD", line)
        lines.append(line)
    return lines


def train(out_dir):
    import sentencepiece as spm
    from transformers import XLMRobertaTokenizer
    import transformers.convert_slow_tokenizer as convert
    from types import SimpleNamespace

    work = tempfile.mkdtemp()
    try:
        text = os.path.join(work, "corpus.txt")
        with open(text, "w", encoding="utf-8") as f:
            f.write("\n".join(corpus()) + "\n")
        spm.set_random_generator_seed(SEED)
        spm.SentencePieceTrainer.train(
            input=text, model_prefix=os.path.join(work, "spm"), model_type="unigram", vocab_size=8000,
            normalization_rule_name="nmt_nfkc", character_coverage=0.9995, num_threads=1,
            shuffle_input_sentence=False, input_sentence_size=0, minloglevel=2)
        src = os.path.join(work, "src")
        os.makedirs(src)
        shutil.copy(os.path.join(work, "spm.model"), os.path.join(src, "sentencepiece.bpe.model"))
        tok = XLMRobertaTokenizer.from_pretrained(src)
        tok.model_max_length = 512
        tok.save_pretrained(out_dir)
        shutil.copy(os.path.join(src, "sentencepiece.bpe.model"), out_dir)

        ids = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
        slow = SimpleNamespace(vocab_file=os.path.join(src, "sentencepiece.bpe.model"),
                               convert_tokens_to_ids=lambda t: ids[t])
        conv = convert.XLMRobertaConverter(slow).converted()
        from tokenizers import AddedToken
        conv.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                 for t in ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]])
        os.makedirs(os.path.join(out_dir, "converter"))
        conv.save(os.path.join(out_dir, "converter", "tokenizer.json"))
    finally:
        shutil.rmtree(work)


def vocab_size(tokenizer_dir):
    with open(os.path.join(tokenizer_dir, "tokenizer.json"), encoding="utf-8") as f:
        return len(json.load(f)["model"]["vocab"])


def randomize(net):
    """Draws the weights wider than the 0.02 of training from scratch, so
    that different texts get clearly different vectors (with small weights
    the position embeddings and biases, common to all texts, dominate the
    mean)."""
    import torch
    with torch.no_grad():
        for name, p in net.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.5 if "embeddings" in name else 0.2)
            elif "LayerNorm.weight" in name:
                p.uniform_(0.8, 1.2)
            else:
                p.normal_(0.0, 0.02)


def xlmr_config(tokenizer_dir, **sizes):
    """XLM-R's configuration (514 positions from padding_idx 1, one token
    type, its special ids) at the given sizes."""
    from transformers import XLMRobertaConfig
    return XLMRobertaConfig(vocab_size=vocab_size(tokenizer_dir), max_position_embeddings=514, type_vocab_size=1,
                            layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0, eos_token_id=2, **sizes)


def save_with_tokenizer(net, tokenizer_dir, out_dir):
    net.save_pretrained(out_dir, safe_serialization=True)
    for name in ["tokenizer.json", "tokenizer_config.json", "sentencepiece.bpe.model"]:
        shutil.copy(os.path.join(tokenizer_dir, name), out_dir)


def model(tokenizer_dir, out_dir):
    import torch
    from transformers import XLMRobertaModel

    torch.manual_seed(21)
    cfg = xlmr_config(tokenizer_dir, hidden_size=96, num_hidden_layers=3, num_attention_heads=4,
                      intermediate_size=384, architectures=["XLMRobertaModel"])
    net = XLMRobertaModel(cfg, add_pooling_layer=True)
    randomize(net)
    save_with_tokenizer(net, tokenizer_dir, out_dir)
    files = {
        "modules.json": [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
        ],
        "1_Pooling/config.json": {
            "word_embedding_dimension": cfg.hidden_size, "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
            "pooling_mode_lasttoken": False, "include_prompt": True,
        },
        "sentence_bert_config.json": {"max_seq_length": 512, "do_lower_case": False},
        "config_sentence_transformers.json": {"prompts": {"query": "query: ", "passage": "passage: "},
                                              "default_prompt_name": None, "similarity_fn_name": "cosine"},
    }
    os.makedirs(os.path.join(out_dir, "1_Pooling"), exist_ok=True)
    os.makedirs(os.path.join(out_dir, "2_Normalize"), exist_ok=True)
    for name, v in files.items():
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            json.dump(v, f, indent=2)


def reranker(tokenizer_dir, out_dir):
    import torch
    from transformers import XLMRobertaForSequenceClassification

    torch.manual_seed(22)
    cfg = xlmr_config(tokenizer_dir, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=256, num_labels=1, architectures=["XLMRobertaForSequenceClassification"])
    cfg.sentence_transformers = {"activation_fn": "torch.nn.modules.activation.Sigmoid"}
    net = XLMRobertaForSequenceClassification(cfg)
    randomize(net)
    save_with_tokenizer(net, tokenizer_dir, out_dir)


def main():
    if sys.argv[1] == "tokenizer":
        train(sys.argv[2])
    elif sys.argv[1] == "model":
        model(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "reranker":
        reranker(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: xlmr_fixture.py tokenizer OUT_DIR | model|reranker TOKENIZER_DIR OUT_DIR")


if __name__ == "__main__":
    main()
