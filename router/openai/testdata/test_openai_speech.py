"""The official openai client's audio.speech against a fusion node with a
Piper voice (FUSION_BASE_URL) and a member forwarding to it
(FUSION_FORWARD_URL). FUSION_TTS_SAMPLES is the sample count of a direct
piper.Speak of FUSION_TTS_TEXT (FUSION_TTS_SAMPLES_FAST at speed 2)."""
import io
import os
import subprocess
import wave

import openai
import pytest

MODEL = os.environ["FUSION_TTS_MODEL"]
TEXT = os.environ["FUSION_TTS_TEXT"]
SAMPLES = int(os.environ["FUSION_TTS_SAMPLES"])
SAMPLES_FAST = int(os.environ["FUSION_TTS_SAMPLES_FAST"])
URLS = [os.environ["FUSION_BASE_URL"], os.environ["FUSION_FORWARD_URL"]]


def client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key=os.environ["FUSION_API_KEY"], max_retries=0, timeout=120)


def wav_samples(data):
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 22050)
        return len(w.readframes(1 << 30)) // 2


@pytest.mark.parametrize("url", URLS, ids=["direct", "forwarded"])
def test_create_wav(url):
    resp = client(url).audio.speech.create(model=MODEL, voice="default", input=TEXT, response_format="wav")
    assert wav_samples(resp.content) == SAMPLES


def test_streaming_pcm():
    with client(URLS[1]).audio.speech.with_streaming_response.create(
            model=MODEL, voice="default", input=TEXT, response_format="pcm") as resp:
        assert resp.headers["content-type"] == "audio/pcm"
        data = b"".join(resp.iter_bytes())
    assert len(data) == 2 * SAMPLES


def test_streaming_wav_speed():
    with client(URLS[1]).audio.speech.with_streaming_response.create(
            model=MODEL, voice="default", input=TEXT, response_format="wav", speed=2.0) as resp:
        data = resp.read()
    assert wav_samples(data) == SAMPLES_FAST
    assert SAMPLES_FAST < 0.7 * SAMPLES


def decoded_samples(data):
    """ffmpeg's decode of an answer: 16-bit mono samples at 22050 Hz."""
    out = subprocess.run(["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-i", "pipe:0",
                          "-f", "s16le", "-ac", "1", "-ar", "22050", "pipe:1"],
                         input=data, capture_output=True, check=True).stdout
    return len(out) // 2


@pytest.mark.parametrize("fmt", ["flac", "mp3"])  # opus and aac: TestPythonSDKSpeech, in Go
def test_formats_forwarded(fmt):
    resp = client(URLS[1]).audio.speech.create(model=MODEL, voice="default", input=TEXT, response_format=fmt)
    n = decoded_samples(resp.content)
    if fmt == "flac":
        assert resp.content[:4] == b"fLaC"
        assert n == SAMPLES
    else:
        assert abs(n - SAMPLES) <= 2500


def test_errors():
    c = client(URLS[1])
    with pytest.raises(openai.BadRequestError) as e:
        c.audio.speech.create(model=MODEL, voice="alloy", input=TEXT, response_format="wav")
    assert "default" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        c.audio.speech.create(model=MODEL, voice="default", input=TEXT, response_format="ogg")
    assert e.value.body["param"] == "response_format"
    with pytest.raises(openai.BadRequestError) as e:
        c.audio.speech.create(model=MODEL, voice="default", input=TEXT, response_format="wav", speed=8)
    assert e.value.body["param"] == "speed"
