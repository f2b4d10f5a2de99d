// A browser session with a Switchboard agent (docs/api.md, "Browser sessions"): the
// microphone as 16-bit PCM over the session's websocket, the agent's voice played as it
// arrives, the transcript as it grows. No dependencies.
"use strict";

const RATE = 16000;
const el = (id) => document.getElementById(id);
const call = {
  socket: null, context: null, microphone: null, capture: null,
  playAt: 0, playing: [], heard: 0, sent: 0, ended: false,
};
// Read by tests and handy in the console.
window.browserSession = call;

function setStatus(text, state) {
  el("status").textContent = text;
  el("status").dataset.state = state;
}

function addSegment(segment) {
  const item = document.createElement("li");
  item.className = segment.speaker;
  const who = document.createElement("span");
  who.className = "speaker";
  who.textContent = `${segment.speaker === "agent" ? "Agent" : "You"} · ${segment.timestamp.toFixed(1)} s`;
  item.append(who, document.createTextNode(segment.text));
  el("transcript").append(item);
  item.scrollIntoView({ block: "nearest" });
}

function play(buffer) {
  const samples = new Int16Array(buffer);
  if (!samples.length) return;
  const audio = call.context.createBuffer(1, samples.length, RATE);
  const channel = audio.getChannelData(0);
  for (let i = 0; i < samples.length; i++) channel[i] = samples[i] / 32768;
  const source = call.context.createBufferSource();
  source.buffer = audio;
  source.connect(call.context.destination);
  const at = Math.max(call.playAt, call.context.currentTime);
  source.start(at);
  call.playAt = at + audio.duration;
  call.playing.push(source);
  source.onended = () => { call.playing = call.playing.filter((s) => s !== source); };
  call.heard += audio.duration;
  el("heard").textContent = call.heard.toFixed(1);
}

function clearPlayback() {
  for (const source of call.playing) { try { source.stop(); } catch (_) { /* done */ } }
  call.playing = [];
  call.playAt = call.context.currentTime;
}

function startCapture() {
  const source = call.context.createMediaStreamSource(call.microphone);
  // 1024 samples at 16 kHz: 64 ms per message.
  const capture = call.context.createScriptProcessor(1024, 1, 1);
  capture.onaudioprocess = (event) => {
    if (!call.socket || call.socket.readyState !== WebSocket.OPEN) return;
    const input = event.inputBuffer.getChannelData(0);
    const pcm = new Int16Array(input.length);
    for (let i = 0; i < input.length; i++) {
      const s = Math.max(-1, Math.min(1, input[i]));
      pcm[i] = s < 0 ? s * 32768 : s * 32767;
    }
    call.socket.send(pcm.buffer);
    call.sent += input.length / RATE;
    el("sent").textContent = call.sent.toFixed(1);
  };
  source.connect(capture);
  capture.connect(call.context.destination); // silent: a processor only runs when connected
  call.capture = capture;
}

function finish(text, state) {
  if (call.ended) return;
  call.ended = true;
  setStatus(text, state);
  if (call.capture) call.capture.disconnect();
  if (call.microphone) call.microphone.getTracks().forEach((track) => track.stop());
  el("hang-up").disabled = true;
  el("call").disabled = false;
}

function onMessage(event) {
  if (typeof event.data !== "string") { play(event.data); return; }
  const message = JSON.parse(event.data);
  if (message.event === "started") {
    setStatus(`Connected: call ${message.call_log_id}. Speak when the agent has greeted you.`, "live");
    el("hang-up").disabled = false;
    startCapture();
  } else if (message.event === "transcript") {
    addSegment(message);
  } else if (message.event === "clear") {
    clearPlayback();
  } else if (message.event === "ended") {
    finish(`Call ended (${message.end_reason || "ended"}).`, "ended");
  }
}

async function session() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.get("token") && fragment.get("url")) {
    return { url: fragment.get("url"), token: fragment.get("token") };
  }
  const key = el("api-key").value.trim();
  const agentId = el("agent-id").value.trim();
  const response = await fetch("/api/v1/calls/web", {
    method: "POST",
    headers: { "Authorization": `Bearer ${key}`, "Content-Type": "application/json" },
    body: JSON.stringify({ agent_id: agentId }),
  });
  const body = await response.json().catch(() => ({}));
  if (response.status !== 201) {
    throw new Error(body.message || body.detail || `HTTP ${response.status}`);
  }
  return body;
}

async function start(event) {
  event.preventDefault();
  el("call").disabled = true;
  el("transcript").replaceChildren();
  Object.assign(call, { playAt: 0, playing: [], heard: 0, sent: 0, ended: false, capture: null });
  try {
    setStatus("Starting…", "idle");
    // Made in the click: browsers let a page play sound after a gesture.
    call.context = new AudioContext({ sampleRate: RATE });
    call.microphone = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true },
    });
    const { url, token } = await session();
    const socket = new WebSocket(url);
    socket.binaryType = "arraybuffer";
    call.socket = socket;
    socket.onopen = () => socket.send(JSON.stringify({ event: "start", token }));
    socket.onmessage = onMessage;
    socket.onclose = (closed) => finish(
      closed.code === 1008 ? "Refused: the session token is not valid (used, expired or unknown)."
        : "Call ended.", closed.code === 1008 ? "error" : "ended");
  } catch (error) {
    finish(`Could not start: ${error.message}`, "error");
  }
}

function hangUp() {
  if (call.socket && call.socket.readyState === WebSocket.OPEN) {
    call.socket.send(JSON.stringify({ event: "stop" }));
    call.socket.close(1000);
  }
  finish("You hung up.", "ended");
}

el("start-form").addEventListener("submit", start);
el("hang-up").addEventListener("click", hangUp);
// Until now a click would have submitted the form natively (reloading the page).
el("call").disabled = false;
