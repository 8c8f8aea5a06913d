"""The official openai Python library's embeddings.create against fusion.

Driven by TestPythonSDKEmbeddings (embeddings_test.go), which starts a node
serving all-MiniLM-L6-v2 (FUSION_EMBED_MODEL, its files in
FUSION_EMBED_DIR), the same weights with a Matryoshka model card
(FUSION_MRL_MODEL), an XLM-RoBERTa in multilingual-e5's layout
(FUSION_XLMR_MODEL, its files in FUSION_XLMR_DIR) and a chat model
(FUSION_CHAT_MODEL), with at most
FUSION_MAX_INPUTS inputs per request, and sets FUSION_BASE_URL and
FUSION_API_KEY. FUSION_FORWARD_URL, when set, is a node without the models
that must forward to the first. Vectors are compared with
sentence-transformers run here on the same files.
"""

import base64
import os

import numpy as np
import openai
import pytest
from sentence_transformers import SentenceTransformer

BASE = os.environ["FUSION_BASE_URL"]
KEY = os.environ["FUSION_API_KEY"]
EMB = os.environ["FUSION_EMBED_MODEL"]
MRL = os.environ["FUSION_MRL_MODEL"]
CHAT = os.environ["FUSION_CHAT_MODEL"]
MAX_INPUTS = int(os.environ["FUSION_MAX_INPUTS"])
XLMR = os.environ["FUSION_XLMR_MODEL"]
URLS = [BASE] + [u for u in [os.environ.get("FUSION_FORWARD_URL")] if u]
TEXTS = ["The cat sits on the mat.", "Der Hund schläft. 🐶", "北京是中国的首都", "a", "Embeddings turn text into vectors " * 40]


@pytest.fixture(scope="module")
def st():
    return SentenceTransformer(os.environ["FUSION_EMBED_DIR"], device="cpu", local_files_only=True)


@pytest.fixture(params=URLS, ids=["direct", "forwarded"][: len(URLS)])
def client(request):
    return openai.OpenAI(base_url=request.param + "/v1", api_key=KEY, max_retries=0)


def cosines(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def test_float_matches_sentence_transformers(client, st):
    r = client.embeddings.create(model=EMB, input=TEXTS, encoding_format="float")
    assert r.object == "list" and r.model == EMB
    assert [d.index for d in r.data] == list(range(len(TEXTS)))
    got = np.array([d.embedding for d in r.data])
    assert got.shape == (len(TEXTS), 384)
    want = st.encode(TEXTS, convert_to_numpy=True)
    assert cosines(got, want).min() >= 0.9999
    assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    tokens = sum(min(len(st.tokenizer(t)["input_ids"]), 256) for t in TEXTS)
    assert r.usage.prompt_tokens == tokens == r.usage.total_tokens


def test_xlmr_matches_sentence_transformers(client):
    st = SentenceTransformer(os.environ["FUSION_XLMR_DIR"], device="cpu", local_files_only=True)
    texts = ["query: " + t for t in TEXTS] + ["ﬁne Ｆｕｌｌ ① e\u0301té  ", "word " * 600]
    r = client.embeddings.create(model=XLMR, input=texts, encoding_format="float")
    got = np.array([d.embedding for d in r.data])
    assert got.shape == (len(texts), st.get_embedding_dimension())
    want = st.encode(texts, convert_to_numpy=True)
    assert cosines(got, want).min() >= 0.9999
    lengths = [len(st.tokenizer(t)["input_ids"]) for t in texts]
    assert r.usage.prompt_tokens == sum(min(n, 512) for n in lengths)
    truncated = [(d.model_extra or {}).get("truncated", False) for d in r.data]
    assert truncated == [n > 512 for n in lengths] and truncated[-1]


def test_base64_is_the_same_vector(client):
    f = client.embeddings.create(model=EMB, input="hello world", encoding_format="float")
    b = client.embeddings.create(model=EMB, input="hello world", encoding_format="base64")
    raw = b.data[0].embedding
    assert isinstance(raw, str)
    decoded = np.frombuffer(base64.b64decode(raw), dtype="<f4")
    assert decoded.tolist() == np.asarray(f.data[0].embedding, dtype=np.float32).tolist()
    # Without encoding_format the SDK asks for base64 and decodes it itself.
    d = client.embeddings.create(model=EMB, input="hello world")
    assert np.asarray(d.data[0].embedding, dtype=np.float32).tolist() == decoded.tolist()


def test_token_ids_input(client, st):
    ids = st.tokenizer("hello world", add_special_tokens=False)["input_ids"]
    by_ids = client.embeddings.create(model=EMB, input=[ids, ids[:1]], encoding_format="float")
    by_text = client.embeddings.create(model=EMB, input=["hello world", st.tokenizer.decode(ids[:1])], encoding_format="float")
    assert cosines([d.embedding for d in by_ids.data], [d.embedding for d in by_text.data]).min() > 0.999999
    one = client.embeddings.create(model=EMB, input=ids, encoding_format="float")
    assert len(one.data) == 1 and one.usage.prompt_tokens == len(ids) + 2


def test_dimensions(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=EMB, input="hello", dimensions=128)
    assert e.value.status_code == 400 and "dimensions" in str(e.value)
    full = client.embeddings.create(model=MRL, input="hello", encoding_format="float").data[0].embedding
    short = client.embeddings.create(model=MRL, input="hello", dimensions=128, encoding_format="float").data[0].embedding
    assert len(short) == 128
    want = np.asarray(full[:128]) / np.linalg.norm(full[:128])
    assert np.allclose(short, want, atol=1e-6)
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model=MRL, input="hello", dimensions=385)


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(input=""), "empty string"),
        (dict(input=[]), "empty array"),
        (dict(input=["ok", ""]), "input[1]"),
        (dict(input=[[]]), "input[0]"),
        (dict(input=["x"] * (MAX_INPUTS + 1)), f"at most {MAX_INPUTS}"),
        (dict(input="x", encoding_format="int8"), "encoding_format"),
        (dict(input=[[30522]]), "vocabulary"),
        (dict(input="word " * 300, extra_body={"truncate": False}), "longer than"),
    ],
)
def test_bad_input_is_400(client, kwargs, needle):
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=EMB, **kwargs)
    assert e.value.status_code == 400
    assert needle in e.value.message
    assert e.value.body["type"] == "invalid_request_error"


def test_model_kinds(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=CHAT, input="hello")
    assert "chat model" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=EMB, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert "embedding model" in e.value.message
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="no-such-model", input="hello")


def test_truncation_is_reported(client):
    r = client.embeddings.create(model=EMB, input=["short", "word " * 300], encoding_format="float")
    extra = [d.model_extra or {} for d in r.data]
    assert [e.get("truncated", False) for e in extra] == [False, True]
    assert r.usage.prompt_tokens == 3 + 256
