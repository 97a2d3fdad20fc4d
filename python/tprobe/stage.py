"""tprobe.stage: write a tprobe pipeline stage in Python.

A stage is a function from records to records; this module does the rest of the stage protocol
(docs/stage-protocol.md, written so that this module could be written from it): the command line
that `tprobe run` passes (--input, --producers, --output, --tap, --ready-fd, your options),
--describe, the ROUTER input with hello/ack and eos/ack, the DEALER outputs, barriers answered with
`synced` after the outputs answered theirs, `final`, the lossy XPUB tap, SIGINT/SIGTERM, counters,
and the exit codes (0, 100 usage or protocol, 111 system).

    from tprobe.stage import Stage, Option

    def handle(record, stage):
        norm = record.stats.get("norm")
        if record.kind == "tensor" and norm is not None and norm > stage.options["threshold"]:
            print(record.entry, record.slot, norm, flush=True)
        return record                          # pass it on; None drops it; a list sends several

    Stage("norm-alert", "print big norms", [Option("threshold", "float", 10.0, "…", min=0)]).main(handle)

Needs pyzmq and msgpack (Debian: python3-zmq, python3-msgpack). Records are decoded as the record
format says (transport/record.h, docs/wire-format.md): major version 1, unknown keys kept.
"""

import argparse
import os
import signal
import socket
import sys
import time

import msgpack
import zmq

EXIT_OK, EXIT_NEGATIVE, EXIT_USAGE, EXIT_SYSTEM = 0, 1, 100, 111
RECORD_MAJOR, RECORD_MINOR = 1, 1
CONTROL_KINDS = {"hello", "ack", "eos", "final", "synced", "control"}
DATA_KINDS = {"session", "tensor", "value", "entry", "flush", "step_end"}
# How often a wait looks at signals and at the process it waits on (no wait is a sleep).
WATCH_S = 0.25
CONTROL_LINGER_MS = 1000  # as the C++ stages' (transport/endpoint.h)
HELLO_TIMEOUT_S = 30.0


class UsageError(Exception):
    """A bad option or a protocol error: exit 100."""


class SystemFailure(Exception):
    """A socket or peer failure: exit 111."""


def encode_header(header):
    return b"TP" + bytes([RECORD_MAJOR, RECORD_MINOR]) + msgpack.packb(header, use_bin_type=True)


def decode_header(frame):
    data = bytes(frame)
    if len(data) < 4 or data[:2] != b"TP":
        raise UsageError("header frame does not start with the magic \"TP\"")
    if data[2] != RECORD_MAJOR:
        raise UsageError(f"record format major version {data[2]} is not supported (this kit reads {RECORD_MAJOR})")
    try:
        header = msgpack.unpackb(data[4:], raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several types; all mean a malformed header
        raise UsageError(f"header is not valid msgpack ({e})") from None
    if not isinstance(header, dict) or not isinstance(header.get("kind"), str):
        raise UsageError("header is not a msgpack map with a kind")
    return header


class Record:
    """One record: `header` (the msgpack map as a dict, every key kept) and `payload` (the payload
    frame as bytes-like, or None). Convenience properties read the usual keys with their defaults."""

    __slots__ = ("header", "_payload")

    def __init__(self, kind=None, header=None, payload=None, **keys):
        self.header = dict(header) if header is not None else {}
        if kind is not None:
            self.header["kind"] = kind
        self.header.update(keys)
        self._payload = payload

    kind = property(lambda self: self.header.get("kind", ""))
    run = property(lambda self: self.header.get("run", ""))
    rank = property(lambda self: self.header.get("rank", -1))
    step = property(lambda self: self.header.get("step", 0))
    seq = property(lambda self: self.header.get("seq", 0))
    entry = property(lambda self: self.header.get("entry", ""))
    slot = property(lambda self: self.header.get("slot", ""))
    dtype = property(lambda self: self.header.get("dtype", self.header.get("foreign_dtype", "")))
    shape = property(lambda self: self.header.get("shape", []))
    stats = property(lambda self: self.header.get("stats") or {})

    @property
    def meta(self):
        return self.header.get("meta")

    @property
    def payload(self):
        """The payload frame's bytes (as stored: see header["codec"]), or None."""
        if self._payload is None:
            return None
        return self._payload.buffer if isinstance(self._payload, zmq.Frame) else self._payload

    def drop_payload(self):
        self._payload = None
        for key in ("stored", "codec", "length"):
            self.header.pop(key, None)

    def frames(self):
        """The record's frames as sent: the header re-encoded, the payload frame shared."""
        header = self.header
        if self._payload is None and "stored" in header:
            header = {k: v for k, v in header.items() if k not in ("stored", "codec", "length")}
        frames = [encode_header(header)]
        if self._payload is not None:
            frames.append(self._payload)
        return frames

    def __repr__(self):
        return f"Record({self.kind} step={self.step} rank={self.rank} {self.entry} {self.slot})"


def _number_text(x):
    """A number as the C++ stages print a bound or a value: 1e9 as 1000000000, -1.0 as -1, 0.5."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e16:
        return str(int(x))
    return str(x)


class Option:
    """One option of the stage: declared once, it drives the parser, --describe and --help.
    type: "string", "int", "float", "bool" or "list" (repeatable string). min/max: an int or float
    option's range. choices: a string (or list) option's only values, an enum; a list option's
    every comma-separated element must be one. required: no default, the option must be given (on
    the command line, or in a manifest's "options"). Checked as the C++ stages check theirs
    (stages/common/stage_main.h, stage_option_check), with the same messages."""

    TYPES = {"string": str, "int": int, "float": float, "bool": None, "list": str}

    def __init__(self, name, type, default, doc, min=None, max=None, choices=None, required=False):
        if type not in self.TYPES:
            raise ValueError(f"option {name}: unknown type {type!r}")
        if choices is not None and (type not in ("string", "list") or isinstance(choices, str)
                                    or not all(isinstance(c, str) for c in choices)):
            raise ValueError(f"option {name}: choices must be a list of strings, for a string or list option")
        self.name, self.type, self.default, self.doc, self.min, self.max = name, type, default, doc, min, max
        self.choices, self.required = list(choices or []), bool(required)

    def describe(self):
        if self.type == "bool":
            default = "true" if self.default else "false"
        elif self.type == "list":
            default = ",".join(self.default or [])
        else:
            default = "" if self.default is None else str(self.default)
        d = {"name": self.name, "type": self.type, "default": default, "doc": self.doc}
        if self.min is not None:
            d["min"] = self.min
        if self.max is not None:
            d["max"] = self.max
        if self.choices:
            d["choices"] = list(self.choices)
        if self.required:
            d["required"] = True
        return d

    def help(self):
        """The doc as --help shows it: with its range, choices and "required", as the C++ stages'."""
        text = self.doc
        if self.min is not None or self.max is not None:
            text += f" (in {self._range()})"
        if self.choices:
            text += f" (one of {', '.join(self.choices)})"
        if self.required:
            text += " (required)"
        return text.replace("%", "%%")  # argparse formats help with %

    def _range(self):
        low = "-inf" if self.min is None else _number_text(self.min)
        high = "inf" if self.max is None else _number_text(self.max)
        return f"[{low}, {high}]"

    def check(self, value):
        """`value` as parsed, or None when the option was not given and has no default. Returns it;
        raises UsageError worded as stage_option_check does ("--x must be one of a, b, got \"c\"",
        "--x is required", "--x must be in [0, 10], got 11")."""
        if value is None:
            if self.required:
                raise UsageError(f"--{self.name} is required")
            return value
        if self.type in ("int", "float"):
            if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
                raise UsageError(f"--{self.name} must be in {self._range()}, got {_number_text(value)}")
        if self.choices:
            items = [value] if self.type != "list" else [item for v in value for item in v.split(",")]
            for item in items:
                if item not in self.choices:
                    raise UsageError(f"--{self.name} must be one of {', '.join(self.choices)}, got \"{item}\"")
        return value


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as UsageError (exit 100 with one fatal line) instead of exit 2."""

    def error(self, message):
        raise UsageError(message)


def _parse_bool(text):
    if text.lower() in ("true", "1", "yes", "on"):
        return True
    if text.lower() in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


COMMON_OPTIONS = [
    Option("hwm", "int", 1000, "records queued per connection before sends block", min=1, max=1e9),
    Option("tap-payload", "bool", False, "publish payload frames on the tap too"),
]


def _host():
    return socket.gethostname()


def _process_gone(pid):
    """True when pid names no running process on this host (absent, or a zombie)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


class _Output:
    """One DEALER to a consumer, with the producer side of the protocol (hello/ack, eos/ack,
    barriers)."""

    def __init__(self, stage, ctx, endpoint, hwm):
        self.stage, self.endpoint = stage, endpoint
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.SNDHWM, hwm)
        self.sock.setsockopt(zmq.RCVHWM, hwm)
        self.sock.setsockopt(zmq.LINGER, 0)  # delivery is proven by the eos ack, not by lingering
        self.sock.setsockopt(zmq.SNDTIMEO, int(WATCH_S * 1000))  # a blocked send looks at signals
        self.sock.connect(endpoint)
        self.send([encode_header({"kind": "hello", "meta": stage.peer_meta()})])
        ack = self.wait_reply("ack", deadline=time.monotonic() + HELLO_TIMEOUT_S, what="hello")
        meta = ack.get("meta") if isinstance(ack.get("meta"), dict) else {}
        self.syncs = meta.get("sync") is True
        self.consumer_pid = meta.get("pid", 0) if meta.get("host") == _host() else 0
        self.consumer = f"{meta.get('name', 'the consumer')} (pid {meta.get('pid', '?')})"

    def send(self, frames):
        for i, frame in enumerate(frames):
            flags = zmq.SNDMORE if i + 1 < len(frames) else 0
            while True:  # blocks at the high-water mark: that is the lossless backpressure
                try:
                    self.sock.send(frame, flags, copy=False)
                    break
                except zmq.Again:
                    self.check_consumer("send to")

    def check_consumer(self, verb):
        if self.stage.stopping:
            raise SystemFailure(f"unable to {verb} {self.endpoint}: stopped while the consumer was not reading")
        if self.consumer_pid and _process_gone(self.consumer_pid):
            raise SystemFailure(f"unable to {verb} {self.endpoint}: {self.consumer} is gone")

    def wait_reply(self, kind, deadline=None, what="", token=None):
        """The consumer's ack (of hello when `deadline` is set, else of eos) or its synced for
        `token`; synced for other tokens (barriers given up on) are skipped. Returns None when a
        stop was requested during a wait that is not the hello's (the wait is abandoned)."""
        while True:
            if self.sock.poll(int(WATCH_S * 1000)):
                header = decode_header(self.sock.recv_multipart()[0])
                if header["kind"] == "synced":
                    meta = header.get("meta") if isinstance(header.get("meta"), dict) else {}
                    if kind == "synced" and meta.get("barrier") == token:
                        return header
                    continue
                if header["kind"] == kind:
                    return header
                raise UsageError(f"{self.endpoint} answered {what or kind} with {header['kind']}")
            if deadline is not None:
                if self.stage.stopping:
                    raise SystemFailure(f"unable to reach {self.endpoint}: stopped while waiting for its ack")
                if time.monotonic() > deadline:
                    raise SystemFailure(f"unable to reach {self.endpoint}: no ack within {HELLO_TIMEOUT_S:g} s")
                continue
            if self.stage.stopping:
                return None
            self.check_consumer("wait for")

    def finish(self, records, dropped):
        self.send([encode_header({"kind": "eos", "meta": {"records": records, "dropped": dropped}})])
        if not self.stage.stopping:
            self.wait_reply("ack", what="eos")
        self.sock.close(0)


class Stage:
    """A stage: its name, summary and option table, and whether it has an input and outputs.
    barriers=False makes it a protocol-1.0 stage that does not answer barriers (its ack lacks
    sync: true), which nothing then waits for."""

    def __init__(self, name, summary, options=(), has_input=True, has_output=True, barriers=True):
        self.name, self.summary = name, summary
        self.option_table = list(options)
        self.has_input, self.has_output, self.barriers = has_input, has_output, barriers
        self.options = {}      # option name -> value, after parsing
        self.sessions = {}     # run id -> the meta of its session record (control endpoint: ["control"])
        self.counts = {"received": 0, "sent": 0, "tap_dropped": 0, "producers": 0, "truncated": 0,
                       "upstream_dropped": 0, "lost": 0}
        self._lost_message = ""  # the first producer whose records never all arrived
        self.stopping = False
        self._stop_signal = 0   # the SIGINT/SIGTERM that set stopping
        self._input_ended = False  # every producer's end-of-stream came
        self.exit_code = EXIT_OK  # a handler sets EXIT_NEGATIVE (1) for a negative answer (a check failed)
        self._control = None
        self._barrier_token = 0

    # ---- what a handler may call ----

    def peer_meta(self):
        return {"name": self.name, "host": _host(), "pid": os.getpid()}

    def control(self, run, command, reason="", **keys):
        """Sends a control record (stop, narrow) to the capture of `run` (a record's .run), through
        the endpoint its session record announced. Never blocks; False when it could not be queued."""
        endpoint = (self.sessions.get(run) or {}).get("control")
        if not endpoint:
            return False
        if self._control is None:
            self._control = {}
        sock = self._control.get(endpoint)
        if sock is None:
            sock = self.ctx.socket(zmq.PUSH)
            # Bounded, not 0: a command sent just before this stage exits must still go out
            # (docs/stage-protocol.md, section 7); a capture that is gone holds the exit 1 s at most.
            sock.setsockopt(zmq.LINGER, CONTROL_LINGER_MS)
            sock.setsockopt(zmq.SNDHWM, 100)
            sock.connect(endpoint)
            self._control[endpoint] = sock
        meta = {"command": command, "from": self.name, "reason": reason}
        meta.update(keys)
        try:
            sock.send(encode_header({"kind": "control", "meta": meta}), zmq.DONTWAIT)
            return True
        except zmq.Again:
            return False

    # ---- the command line ----

    def describe(self):
        return {"stage": self.name, "summary": self.summary, "input": self.has_input, "output": self.has_output,
                "options": [o.describe() for o in self.option_table + COMMON_OPTIONS]}

    def _parser(self):
        p = _Parser(prog=self.name, description=self.summary)
        p.add_argument("--describe", action="store_true", help="print this stage's option table as JSON")
        if self.has_input:
            p.add_argument("--input", help="endpoint to bind (ipc://, tcp://, inproc://)")
            p.add_argument("--producers", type=int, default=1, help="producers to expect; 0 = until final")
        if self.has_output:
            p.add_argument("--output", action="append", default=[], help="consumer endpoint (repeatable)")
        p.add_argument("--tap", default="", help="endpoint to bind a lossy live tap on")
        p.add_argument("--ready-fd", type=int, default=-1, help="write a line to this fd once ready")
        for o in self.option_table + COMMON_OPTIONS:
            flag = "--" + o.name
            # A required option's default is None, so that "not given" is seen whatever it declares.
            default = None if o.required else o.default
            if o.type == "bool":
                p.add_argument(flag, type=_parse_bool, nargs="?", const=True, default=default, help=o.help())
            elif o.type == "list":
                p.add_argument(flag, action="append", default=None, help=o.help())
            else:
                p.add_argument(flag, type=Option.TYPES[o.type], default=default, help=o.help())
        return p

    def _parse(self, argv):
        parser = self._parser()
        args = parser.parse_args(argv)
        if args.describe:
            import json
            print(json.dumps(self.describe()))
            raise SystemExit(EXIT_OK)
        if self.has_input and not args.input:
            raise UsageError("--input is required")
        if self.has_input and args.producers < 0:
            raise UsageError("--producers must be >= 0")
        for o in self.option_table + COMMON_OPTIONS:
            value = getattr(args, o.name.replace("-", "_"))
            if o.type == "list" and value is None and not o.required:
                value = list(o.default or [])
            self.options[o.name] = o.check(value)
        return args

    # ---- running ----

    def main(self, handler, argv=None):
        """Runs the stage with `handler(record, stage)` and exits the process with its code."""
        sys.exit(self.run(handler, argv))

    def run(self, handler, argv=None):
        """handler(record, stage) is called for every data record (session, tensor, value, entry,
        flush, step_end) and returns what to send on: the record, a list of records, or None.
        `finish(stage)`, if the handler has such an attribute, is called at the end of the stream
        and may return records too. Returns the exit code: stage.exit_code (0 unless the handler
        set 1, a negative answer), 100 for usage or protocol errors, 111 for system errors and for
        an exception raised by the handler, 128+N when signal N (SIGINT, SIGTERM) cut the stream
        short, before its end-of-stream."""
        try:
            args = self._parse(sys.argv[1:] if argv is None else argv)
            return self._serve(args, handler)
        except SystemExit as e:
            return e.code if isinstance(e.code, int) else EXIT_OK
        except UsageError as e:
            print(f"{self.name}: fatal: {e}", file=sys.stderr, flush=True)
            return EXIT_USAGE
        except (SystemFailure, zmq.ZMQError, OSError) as e:
            print(f"{self.name}: fatal: {e}", file=sys.stderr, flush=True)
            return EXIT_SYSTEM
        except Exception as e:  # a bug in the handler: not a negative answer (1), a failed stage
            import traceback
            traceback.print_exc()
            print(f"{self.name}: fatal: internal error: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            return EXIT_SYSTEM

    def _on_signal(self, signum, frame):
        self.stopping = True
        self._stop_signal = self._stop_signal or signum

    def _serve(self, args, handler):
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        hwm = self.options["hwm"]
        self._tap_payload = self.options["tap-payload"]
        self.ctx = zmq.Context()
        router = None
        try:
            if self.has_input:
                router = self.ctx.socket(zmq.ROUTER)
                router.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a reply to a gone producer fails, not vanishes
                router.setsockopt(zmq.RCVHWM, hwm)
                router.setsockopt(zmq.LINGER, 1000)
                self._bind(router, args.input)
                self._input_endpoint = router.getsockopt(zmq.LAST_ENDPOINT).decode()
            self._tap = None
            if args.tap:
                self._tap = self.ctx.socket(zmq.XPUB)
                self._tap.setsockopt(zmq.XPUB_NODROP, 1)  # a full subscriber is EAGAIN: counted, dropped
                self._tap.setsockopt(zmq.SNDHWM, hwm)
                self._tap.setsockopt(zmq.LINGER, 0)
                self._bind(self._tap, args.tap)
            self._outputs = [_Output(self, self.ctx, e, hwm) for e in (args.output if self.has_output else [])]
            if args.ready_fd >= 0:
                os.write(args.ready_fd, b"\n")
                os.close(args.ready_fd)
            if router is not None:
                self._receive_loop(router, args.producers, handler)
            finish = getattr(handler, "finish", None)
            if finish is not None and not self.stopping:
                self._emit(finish(self), None)
            for o in self._outputs:  # what was lost on the way here is dropped for everyone downstream
                o.finish(self.counts["sent"], self.counts["upstream_dropped"] + self.counts["lost"])
            if self._tap is not None:
                self._publish([encode_header({"kind": "eos", "meta": {"records": self.counts["sent"]}})])
            c = self.counts
            print(f"{self.name}: {c['received']} records received, {c['sent']} sent, {c['producers']} producers, "
                  f"{c['truncated']} truncated, tap dropped {c['tap_dropped']}"
                  f"{', interrupted' if self.stopping else ''}", file=sys.stderr, flush=True)
            if self.counts["lost"]:  # once what came is handled and passed on
                raise SystemFailure(self._lost_message)
            if self.stopping and not self._input_ended and self.exit_code == EXIT_OK:
                # A signal cut the stream short: what was written is complete but not all (128+N,
                # as the C++ stages, docs/stage-protocol.md).
                return 128 + self._stop_signal
            return self.exit_code
        finally:
            for sock in (self._control or {}).values():
                sock.close(linger=CONTROL_LINGER_MS)  # before destroy(), which would make it 0
            self.ctx.destroy(linger=0)

    def _bind(self, sock, endpoint):
        if endpoint.startswith("tcp://:") or endpoint.startswith("tcp://*:"):
            endpoint = "tcp://127.0.0.1:" + endpoint.rsplit(":", 1)[1]  # loopback unless an address is given
        try:
            sock.bind(endpoint)
        except zmq.ZMQError as e:
            raise SystemFailure(f"unable to bind {endpoint}: {e}") from None

    def _receive_loop(self, router, expected, handler):
        producers = {}  # routing id -> {"name", "pid", "host", "done", "seen"}
        registration_closed = False
        while True:
            if registration_closed and all(p["done"] for p in producers.values()):
                self._input_ended = True
                return
            if self.stopping:
                return
            if not router.poll(int(WATCH_S * 1000)):
                self._reap(producers)
                continue
            frames = router.recv_multipart(copy=False)
            ident, header = frames[0].bytes, decode_header(frames[1].buffer)
            kind = header["kind"]
            p = producers.get(ident)
            if p is not None:
                p["seen"] = time.monotonic()
            if kind == "hello":
                meta = header.get("meta") if isinstance(header.get("meta"), dict) else {}
                producers[ident] = {"name": meta.get("name", ""), "pid": meta.get("pid", 0),
                                    "host": meta.get("host", ""), "done": False, "seen": time.monotonic(),
                                    "numbered": meta.get("numbered") is True, "received": 0, "next_seq": 1,
                                    "skipped": 0, "first_skipped": 0}
                self.counts["producers"] += 1
                if expected > 0 and len(producers) >= expected:
                    registration_closed = True
                self._reply(router, ident, self._ack())
            elif kind == "final":
                registration_closed = True
                self._reply(router, ident, self._ack())
            elif kind == "eos":
                meta = header.get("meta") if isinstance(header.get("meta"), dict) else {}
                if p is not None:
                    p["done"] = True
                    sent = meta.get("records")
                    self._stream_end(p, sent if isinstance(sent, int) else None, self._input_endpoint)
                self.counts["upstream_dropped"] += int(meta.get("dropped", 0) or 0)
                self._reply(router, ident, self._ack())
            elif kind in CONTROL_KINDS:
                raise UsageError(f"a producer sent {kind} to {self.name}'s input, which only consumers send")
            else:
                if p is None:
                    raise UsageError(f"{kind} record from a producer that did not say hello first")
                record = Record(header=header, payload=frames[2] if len(frames) > 2 else None)
                self.counts["received"] += 1
                self._arrival(p, header.get("seq", 0))
                if self._tap is not None and not self._outputs:
                    self._publish(self._tap_frames(record))  # a sink's tap shows what it consumes
                if kind == "session" and isinstance(header.get("meta"), dict):
                    self.sessions[record.run] = header["meta"]
                meta = header.get("meta")
                token = meta.get("barrier") if isinstance(meta, dict) else None
                outputs = handler(record, self)
                waits = self._emit(outputs, token)
                if token is not None and self.barriers:
                    # Handled, and passed on: answer once every output that answers barriers did.
                    for output, own in waits:
                        if output.wait_reply("synced", token=own) is None:
                            return  # stopping: the barrier is abandoned, not answered
                    self._reply(router, ident, encode_header({"kind": "synced", "meta": {"barrier": token}}))

    # Lossless, checked (docs/stage-protocol.md, "Losses"): a producer's eos counts the data records
    # it sent, and a numbered producer's (a capture's) carry seq 1, 2, 3, ... in order.
    def _arrival(self, p, seq):
        p["received"] += 1
        if not p["numbered"] or seq == p["next_seq"]:
            p["next_seq"] += 1
            return
        if not isinstance(seq, int) or seq < p["next_seq"]:
            raise UsageError(f"{p['name']} (pid {p['pid']}) sent seq {seq} after seq {p['next_seq'] - 1}: "
                             "its records must come in order, once")
        if not p["first_skipped"]:
            p["first_skipped"] = p["next_seq"]
        p["skipped"] += seq - p["next_seq"]
        p["next_seq"] = seq + 1

    def _stream_end(self, p, sent, where):
        lost = max(sent - p["received"] if sent is not None and sent > p["received"] else 0, p["skipped"])
        if not lost:
            return
        self.counts["lost"] += lost
        if self._lost_message:
            return
        who = p["name"] or "a producer"
        if p["pid"]:
            who += f" (pid {p['pid']})"
        first = f" (the first: seq {p['first_skipped']})" if p["first_skipped"] else ""
        self._lost_message = (f"{lost} record{'' if lost == 1 else 's'} that {who} sent never arrived on {where}"
                              f"{first}; what came is written, and the output lacks {'it' if lost == 1 else 'them'}")

    def _ack(self):
        meta = self.peer_meta()
        if self.barriers:
            meta["sync"] = True
        return encode_header({"kind": "ack", "meta": meta})

    def _reply(self, router, ident, header_frame):
        try:
            router.send_multipart([ident, header_frame])
        except zmq.ZMQError as e:
            if e.errno != zmq.EHOSTUNREACH:  # the producer is gone: nobody waits for the answer
                raise

    def _reap(self, producers):
        """A producer on this host that died without eos and is silent for a second is truncated."""
        now, host = time.monotonic(), _host()
        for p in producers.values():
            if not p["done"] and p["host"] == host and now - p["seen"] > 1 and _process_gone(p["pid"]):
                p["done"] = True
                self.counts["truncated"] += 1
                self._stream_end(p, None, self._input_endpoint)
                print(f"{self.name}: warning: producer {p['name']} (pid {p['pid']}) exited without end-of-stream; "
                      f"its stream is truncated", file=sys.stderr, flush=True)

    def _emit(self, outputs, token):
        """Sends the handler's records; a barrier record goes on under this stage's own token.
        Returns the (output, token) pairs to wait for."""
        if outputs is None:
            return []
        if isinstance(outputs, Record):
            outputs = [outputs]
        waits = []
        for record in outputs:
            meta = record.header.get("meta")
            if isinstance(meta, dict) and "barrier" in meta:
                if not self.barriers:
                    meta = dict(meta)
                    del meta["barrier"]  # a 1.0 stage passes no barrier on
                    record.header["meta"] = meta
                else:
                    self._barrier_token += 1
                    record.header["meta"] = dict(meta, barrier=self._barrier_token)
                    waits += [(o, self._barrier_token) for o in self._outputs if o.syncs]
            frames = record.frames()
            for o in self._outputs:
                o.send(list(frames))
            self.counts["sent"] += 1
            if self._tap is not None and self._outputs:
                self._publish(frames if record._payload is None or self._tap_payload else self._tap_frames(record))
        return waits

    def _tap_frames(self, record):
        if record._payload is not None and not self._tap_payload:
            return [encode_header({k: v for k, v in record.header.items() if k not in ("stored", "codec", "length")})]
        return record.frames()

    def _publish(self, frames):
        try:
            self._tap.send_multipart(frames, zmq.DONTWAIT, copy=False)
        except zmq.Again:
            self.counts["tap_dropped"] += 1
