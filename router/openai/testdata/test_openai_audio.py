"""The official openai Python library's audio.transcriptions.create
(streamed too) and audio.translations.create against fusion.

Driven by TestPythonSDKTranscriptions (audio_test.go), which starts a node
serving Whisper tiny.en (FUSION_ASR_MODEL, its CTranslate2 files in
FUSION_ASR_DIR) and sets FUSION_BASE_URL, FUSION_API_KEY and FUSION_WAV (16
kHz mono speech). FUSION_FORWARD_URL is a node of the same cluster without
the model that must forward to the first. Every answer is compared with
faster-whisper's greedy transcription of the same file, field by field.
"""

import os

import openai
import pytest
from faster_whisper import WhisperModel
from faster_whisper.utils import format_timestamp

BASE = os.environ["FUSION_BASE_URL"]
FORWARD = os.environ["FUSION_FORWARD_URL"]
KEY = os.environ["FUSION_API_KEY"]
ASR = os.environ["FUSION_ASR_MODEL"]
WAV = os.environ["FUSION_WAV"]


@pytest.fixture(scope="module")
def ref():
    model = WhisperModel(os.environ["FUSION_ASR_DIR"], device="cpu", compute_type="float32", cpu_threads=2)
    segs, info = model.transcribe(WAV, beam_size=1)
    return list(segs), info


def client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=600)


def check_verbose(got, ref):
    segs, info = ref
    assert got.task == "transcribe"
    assert got.language == "english"
    # faster-whisper's language_probability: 1 for an English-only model.
    assert got.model_extra["language_probability"] == pytest.approx(info.language_probability)
    assert got.duration == pytest.approx(info.duration, abs=1e-6)
    assert got.text == "".join(s.text for s in segs).strip()
    assert len(got.segments) == len(segs)
    for i, (g, w) in enumerate(zip(got.segments, segs)):
        assert g.id == i
        assert g.seek == w.seek
        assert g.start == w.start and g.end == w.end
        assert g.text == w.text
        assert list(g.tokens) == list(w.tokens)
        assert g.temperature == w.temperature
        assert g.avg_logprob == pytest.approx(w.avg_logprob, abs=1e-3)
        assert g.no_speech_prob == pytest.approx(w.no_speech_prob, abs=1e-3)
        # Go's deflate is not zlib's: a few percent apart.
        assert g.compression_ratio == pytest.approx(w.compression_ratio, rel=0.1)


@pytest.mark.parametrize("url", [BASE, FORWARD], ids=["direct", "forwarded"])
def test_verbose_json(url, ref):
    with open(WAV, "rb") as f:
        got = client(url).audio.transcriptions.create(model=ASR, file=f, response_format="verbose_json", timestamp_granularities=["segment"])
    check_verbose(got, ref)


@pytest.fixture(scope="module")
def ref_words():
    model = WhisperModel(os.environ["FUSION_ASR_DIR"], device="cpu", compute_type="float32", cpu_threads=2)
    segs, info = model.transcribe(WAV, beam_size=1, word_timestamps=True)
    return list(segs), info


def test_words_forwarded(ref_words):
    # Through the node without the model: the words cross the gRPC hop.
    with open(WAV, "rb") as f:
        got = client(FORWARD).audio.transcriptions.create(model=ASR, file=f, response_format="verbose_json", timestamp_granularities=["word", "segment"])
    segs, _ = ref_words
    want = [w for s in segs for w in s.words]
    assert [w.word for w in got.words] == [w.word.strip() for w in want]
    for g, w in zip(got.words, want):
        # One alignment step (20 ms) at most; measured equal.
        assert g.start == pytest.approx(w.start, abs=0.02) and g.end == pytest.approx(w.end, abs=0.02)
    assert len(got.segments) == len(segs)
    for g, w in zip(got.segments, segs):
        assert list(g.tokens) == list(w.tokens)
        assert g.start == pytest.approx(w.start, abs=0.02) and g.end == pytest.approx(w.end, abs=0.02)


def test_json_text_srt_vtt(ref):
    segs, info = ref
    text = "".join(s.text for s in segs).strip()
    c = client(BASE)
    with open(WAV, "rb") as f:
        got = c.audio.transcriptions.create(model=ASR, file=f, language="en", temperature=0)
    assert got.text == text
    assert got.model_extra["language"] == "en" and got.model_extra["duration"] == pytest.approx(info.duration)
    with open(WAV, "rb") as f:
        assert c.audio.transcriptions.create(model=ASR, file=f, response_format="text").strip() == text
    srt = "".join(
        f"{i}\n{format_timestamp(s.start, True, ',')} --> {format_timestamp(s.end, True, ',')}\n{s.text.strip()}\n\n"
        for i, s in enumerate(segs, 1)
    )
    with open(WAV, "rb") as f:
        assert c.audio.transcriptions.create(model=ASR, file=f, response_format="srt") == srt
    vtt = "WEBVTT\n\n" + "".join(
        f"{format_timestamp(s.start, True)} --> {format_timestamp(s.end, True)}\n{s.text.strip()}\n\n" for s in segs
    )
    with open(WAV, "rb") as f:
        assert c.audio.transcriptions.create(model=ASR, file=f, response_format="vtt") == vtt


def test_max_tokens_forwarded(ref):
    # The cap crosses the gRPC hop: at most 10 tokens decoded, the
    # transcript a prefix of the uncapped one (greedy decoding).
    segs, _ = ref
    tokens = [t for s in segs for t in s.tokens]
    with open(WAV, "rb") as f:
        got = client(FORWARD).audio.transcriptions.create(model=ASR, file=f, response_format="verbose_json",
                                                      extra_body={"max_tokens": 10})
    got_tokens = [t for s in got.segments for t in s.tokens]
    assert 0 < len(got_tokens) <= 10 < len(tokens)
    assert got_tokens == tokens[:len(got_tokens)]


@pytest.mark.parametrize("url", [BASE, FORWARD], ids=["direct", "forwarded"])
def test_errors(url):
    c = client(url)
    with open(WAV, "rb") as f, pytest.raises(openai.BadRequestError) as e:
        c.audio.translations.create(model=ASR, file=f)
    assert "cannot translate" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        c.audio.transcriptions.create(model=ASR, file=("notes.wav", b"this is not audio at all", "audio/wav"))
    assert e.value.body["type"] == "invalid_request_error" and "audio" in e.value.message
    with open(WAV, "rb") as f, pytest.raises(openai.BadRequestError) as e:
        c.audio.transcriptions.create(model=ASR, file=f, language="fr")
    assert "English-only" in e.value.message
    with open(WAV, "rb") as f, pytest.raises(openai.BadRequestError) as e:
        c.audio.transcriptions.create(model=ASR, file=f, extra_body={"max_tokens": -1})
    assert e.value.body["param"] == "max_tokens"
    with open(WAV, "rb") as f, pytest.raises(openai.NotFoundError):
        c.audio.transcriptions.create(model="no-such-model", file=f)


@pytest.mark.parametrize("url", [BASE, FORWARD], ids=["direct", "forwarded"])
def test_stream(url, ref):
    segs, _ = ref
    with open(WAV, "rb") as f:
        events = list(client(url).audio.transcriptions.create(model=ASR, file=f, stream=True))
    deltas = [e.delta for e in events if e.type == "transcript.text.delta"]
    text = "".join(s.text for s in segs).strip()
    # One delta per segment, as decoded; they add up to the text.
    assert len(deltas) == len(segs)
    assert "".join(deltas) == text
    assert events[-1].type == "transcript.text.done" and events[-1].text == text
