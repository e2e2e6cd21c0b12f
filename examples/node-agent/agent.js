#!/usr/bin/env node
// An accord agent in JavaScript (Node.js 20, no dependencies, no build step).
//
//   node agent.js --server URL --key FILE --port P [--host 127.0.0.1] [--endpoint URL]
//                 [--name NAME] [--capability arithmetic] [--items N]
//
// It does over accord's plain HTTP API what the kit (accord agent run) does in Python, keeping its
// own Ed25519 key (a did:key) the whole time; the service never sees it:
//
//   1. registers by DID-auth: POST /registration/challenge, then POST /remote/registration with
//      a Verifiable Presentation (eddsa-jcs-2022 proof) and its own signed `agent.registered`
//      ledger entry declaring `"custody": "self"`; its record is an `http` agent at
//      http://HOST:PORT/run, or at --endpoint (its public URL, when it listens behind a proxy);
//   2. sits an exam in each capability (POST /exams, one signed `exam.answered` entry per item,
//      POST /exams/{id}/grade) and earns the credential, then binds a payout address of its own
//      (a secp256k1 key next to its key file) with its `payout.bound` entry;
//   3. serves POST /run (one item in, its answer out: the format of exams and team work alike)
//      and POST /sign, where it signs its own team reports whose sealed answers are the ones it
//      gave, nothing else.
//
// Every request to the service is signed with an RFC 9421 HTTP message signature. It prints one
// JSON line per step on stdout (`registered`, `credential`, `payout`, `ready`, then `ran`,
// `signed` and `refused` while it serves); SIGTERM or SIGINT stops it (exit 0).
//
// Only the `arithmetic` capability has a solver here (exact rational arithmetic with BigInt).
// Everything is written out with Node's built-ins so it can be ported line by line: RFC 8785
// (JCS) canonical JSON, base58btc for did:key, RFC 9421 signatures, RFC 9530 Content-Digest, the
// eddsa-jcs-2022 Data Integrity proof and accord's ledger entry. See README.md beside this file.

"use strict";

const crypto = require("node:crypto");
const fs = require("node:fs");
const http = require("node:http");
const path = require("node:path");

// ---------------------------------------------------------------------------------------------
// Encodings: base64, base64url, base58btc, hex
// ---------------------------------------------------------------------------------------------

/** Base64url without padding (RFC 4648 §5): how accord writes signatures in JSON. */
function b64url(bytes) {
  return Buffer.from(bytes).toString("base64url");
}

/** Base64url text back to bytes, refusing anything that is not the one canonical spelling. */
function fromB64url(text) {
  const bytes = Buffer.from(text, "base64url");
  if (b64url(bytes) !== text) throw new Error("not canonical base64url");
  return bytes;
}

const BASE58_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

/** Bitcoin-alphabet base58 (the "z" multibase, base58btc): a big-endian number in base 58, one
 *  leading "1" per leading zero byte. */
function base58btc(bytes) {
  let number = BigInt("0x" + (Buffer.from(bytes).toString("hex") || "0"));
  let text = "";
  while (number > 0n) {
    text = BASE58_ALPHABET[Number(number % 58n)] + text;
    number /= 58n;
  }
  for (const byte of bytes) {
    if (byte !== 0) break;
    text = "1" + text;
  }
  return text;
}

function sha256(bytes) {
  return crypto.createHash("sha256").update(bytes).digest();
}

// ---------------------------------------------------------------------------------------------
// RFC 8785 JSON Canonicalization Scheme: the only bytes accord ever hashes or signs
// ---------------------------------------------------------------------------------------------

/** JCS text of a JSON value: object keys sorted by their UTF-16 code units (JavaScript's own
 *  string order), no whitespace, strings and numbers exactly as JSON.stringify writes them (the
 *  ECMAScript serialisation RFC 8785 adopts). accord never signs floats, and its integers stay
 *  within ±(2**53 - 1); large amounts (wei) are decimal strings. */
function jcs(value) {
  if (value === null || typeof value === "boolean" || typeof value === "string") {
    return JSON.stringify(value);
  }
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new Error("JCS has no form for NaN or infinities");
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return "[" + value.map(jcs).join(",") + "]";
  if (typeof value === "object") {
    const keys = Object.keys(value).sort();
    return "{" + keys.map((key) => JSON.stringify(key) + ":" + jcs(value[key])).join(",") + "}";
  }
  throw new Error(`JCS has no form for a ${typeof value}`);
}

/** Parse bytes that must already be canonical (as accord's `parse_canonical` does): one value
 *  has exactly one signed form, so anything else is refused. */
function parseCanonical(text) {
  const value = JSON.parse(text);
  if (jcs(value) !== text) throw new Error("the JSON is not in RFC 8785 canonical form");
  return value;
}

// ---------------------------------------------------------------------------------------------
// The agent's key: Ed25519, named by its did:key
// ---------------------------------------------------------------------------------------------

// A raw 32-byte Ed25519 seed becomes a Node KeyObject through this fixed PKCS#8 prefix.
const PKCS8_ED25519_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");
// did:key for Ed25519 = "did:key:z" + base58btc(multicodec 0xed 0x01 || 32-byte public key).
const ED25519_MULTICODEC = Buffer.from([0xed, 0x01]);

class Signer {
  constructor(seed) {
    this.seed = seed;
    this.privateKey = crypto.createPrivateKey({
      key: Buffer.concat([PKCS8_ED25519_PREFIX, seed]),
      format: "der",
      type: "pkcs8",
    });
    // The SPKI DER of an Ed25519 key ends with the 32 raw public key bytes.
    const spki = crypto.createPublicKey(this.privateKey).export({ format: "der", type: "spki" });
    this.publicKey = spki.subarray(spki.length - 32);
    this.did = "did:key:z" + base58btc(Buffer.concat([ED25519_MULTICODEC, this.publicKey]));
    // The verification method (`kid` of ledger entries, of proofs): the DID + "#" + its key.
    this.kid = `${this.did}#${this.did.slice("did:key:".length)}`;
  }

  /** The 64-byte Ed25519 signature of `message` (bytes). */
  sign(message) {
    return crypto.sign(null, Buffer.from(message), this.privateKey);
  }
}

/** The key in `file`, made there (mode 0600) on first use. The file has accord's key file
 *  format, {"type": "Ed25519", "did": ..., "seed": hex}, so `accord` tools can read it too. */
function loadKey(file) {
  if (!fs.existsSync(file)) {
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    const signer = new Signer(crypto.randomBytes(32));
    const document = { type: "Ed25519", did: signer.did, seed: signer.seed.toString("hex") };
    fs.writeFileSync(file, JSON.stringify(document) + "\n", { mode: 0o600, flag: "wx" });
  }
  const document = JSON.parse(fs.readFileSync(file, "utf8"));
  const signer = new Signer(Buffer.from(document.seed, "hex"));
  if (document.did && document.did !== signer.did) throw new Error(`${file}: seed and DID differ`);
  return signer;
}

// ---------------------------------------------------------------------------------------------
// RFC 9421 HTTP message signatures, as accord asks for them (identity/http_signatures.py)
// ---------------------------------------------------------------------------------------------

/** The headers that sign one request: `Content-Digest` (RFC 9530) and `Content-Type` when there
 *  is a body, `Signature-Input` and `Signature` (label free, here "accord"; `tag="accord"`
 *  selects it). Covered: @method, @target-uri, @authority always, content-digest and
 *  content-type with a body. Parameters: created, expires, a fresh nonce, keyid (the did:key),
 *  alg "ed25519", tag "accord". `url` is a WHATWG URL; `body` a Buffer or null. */
function signRequest(signer, method, url, body) {
  const headers = {};
  const components = ["@method", "@target-uri", "@authority"];
  if (body && body.length > 0) {
    headers["Content-Digest"] = `sha-256=:${sha256(body).toString("base64")}:`;
    headers["Content-Type"] = "application/json";
    components.push("content-digest", "content-type");
  }
  // @authority is host[:port], lower case, without the scheme's default port (URL.host is
  // exactly that); @target-uri is the absolute URI as sent, query included.
  const authority = url.host;
  const values = {
    "@method": method.toUpperCase(),
    "@target-uri": `${url.protocol}//${authority}${url.pathname}${url.search}`,
    "@authority": authority,
    "content-digest": headers["Content-Digest"],
    "content-type": headers["Content-Type"],
  };
  const created = Math.floor(Date.now() / 1000);
  // An RFC 8941 inner list of the covered names, then its parameters, in this order.
  const params =
    `(${components.map((name) => `"${name}"`).join(" ")})` +
    `;created=${created};expires=${created + 300}` +
    `;nonce="${b64url(crypto.randomBytes(18))}";keyid="${signer.did}"` +
    `;alg="ed25519";tag="accord"`;
  // The signature base (RFC 9421 §2.5): one `"name": value` line per covered component, then
  // the "@signature-params" line; lines joined by "\n", no newline at the end.
  const base = [
    ...components.map((name) => `"${name}": ${values[name]}`),
    `"@signature-params": ${params}`,
  ].join("\n");
  headers["Signature-Input"] = `accord=${params}`;
  headers["Signature"] = `accord=:${signer.sign(Buffer.from(base, "ascii")).toString("base64")}:`;
  return headers;
}

// ---------------------------------------------------------------------------------------------
// The service's API, every request signed by the agent
// ---------------------------------------------------------------------------------------------

class Client {
  constructor(server, signer) {
    this.server = server.replace(/\/+$/, "");
    this.signer = signer;
  }

  /** One signed request; the parsed JSON reply. Any status >= 400 stops the agent with the
   *  service's problem+json (RFC 9457), and on a 401 what the service asks for. */
  async call(method, pathAndQuery, body = null) {
    const url = new URL(this.server + pathAndQuery);
    const bytes = body === null ? null : Buffer.from(JSON.stringify(body), "utf8");
    const headers = { Accept: "application/json", ...signRequest(this.signer, method, url, bytes) };
    const response = await fetch(url, { method, headers, body: bytes ?? undefined });
    const text = await response.text();
    if (response.status >= 400) {
      const asked = response.headers.get("accept-signature");
      const hint = asked ? ` (Accept-Signature: ${asked})` : "";
      throw new Error(`${method} ${pathAndQuery}: HTTP ${response.status}: ${text}${hint}`);
    }
    return JSON.parse(text);
  }

  /** A ledger entry of the agent's own: {event, kid, sig}, where event is
   *  {v: 1, kind, actor, seq, at, subject, body} and sig the Ed25519 signature of JCS(event),
   *  base64url. The seq (the agent's next) and the time come from the service. */
  async entry(kind, subject, body) {
    const info = await this.call("GET", `/agents/${this.signer.did}/next-seq`);
    const event = {
      v: 1,
      kind,
      actor: this.signer.did,
      seq: info.seq,
      at: info.server_time, // RFC 3339 UTC with milliseconds: 2026-11-29T14:00:00.000Z
      subject,
      body,
    };
    const sig = this.signer.sign(Buffer.from(jcs(event), "utf8"));
    return { event, kid: this.signer.kid, sig: b64url(sig) };
  }
}

// ---------------------------------------------------------------------------------------------
// DID-auth: a Verifiable Presentation with an eddsa-jcs-2022 Data Integrity proof
// ---------------------------------------------------------------------------------------------

/** Sign `document` with an eddsa-jcs-2022 proof (identity/dataintegrity.py):
 *    proof configuration = the options + the document's @context;
 *    hashData = SHA-256(JCS(configuration)) || SHA-256(JCS(document without proof));
 *    proofValue = "z" + base58btc(Ed25519 signature of hashData). */
function addProof(signer, document, options) {
  const config = { ...options };
  if ("@context" in document) config["@context"] = document["@context"];
  const hashData = Buffer.concat([
    sha256(Buffer.from(jcs(config), "utf8")),
    sha256(Buffer.from(jcs(document), "utf8")),
  ]);
  return { ...document, proof: { ...config, proofValue: "z" + base58btc(signer.sign(hashData)) } };
}

/** A VC 2.0 presentation by the agent, proof purpose `authentication`, over the service's
 *  challenge and domain (identity/presentations.py `create_presentation`). */
function createPresentation(signer, challenge, domain) {
  const presentation = {
    "@context": ["https://www.w3.org/ns/credentials/v2"],
    type: ["VerifiablePresentation"],
    holder: signer.did,
    verifiableCredential: [],
  };
  return addProof(signer, presentation, {
    type: "DataIntegrityProof",
    cryptosuite: "eddsa-jcs-2022",
    created: new Date().toISOString().replace(/\.\d{3}Z$/, "Z"), // to the second
    verificationMethod: signer.kid,
    proofPurpose: "authentication",
    challenge,
    domain,
  });
}

async function register(client, name, endpoint) {
  const { challenge, domain } = await client.call("POST", "/registration/challenge");
  const presentation = createPresentation(client.signer, challenge, domain);
  // Exactly the body the service would log for a hosted agent, but custody "self".
  const entry = await client.entry("agent.registered", client.signer.did, {
    name,
    domain,
    challenge,
    proof: presentation.proof,
    custody: "self",
  });
  return client.call("POST", "/remote/registration", {
    name,
    endpoint,
    challenge,
    presentation,
    entry,
  });
}

// ---------------------------------------------------------------------------------------------
// Exams: the items, one signed `exam.answered` entry each, then the grade
// ---------------------------------------------------------------------------------------------

async function sitExam(client, capability, items) {
  const exam = await client.call("POST", "/exams", { capability, items });
  for (const item of exam.items) {
    let answer;
    try {
      answer = solve(item);
    } catch (error) {
      if (!(error instanceof TaskError)) throw error;
      continue; // an item it cannot solve is left unanswered (it counts as wrong)
    }
    const entry = await client.entry("exam.answered", exam.exam_id, {
      exam_id: exam.exam_id,
      item_id: item.item_id,
      answer,
    });
    await client.call("POST", `/exams/${exam.exam_id}/answers`, { entry });
  }
  return client.call("POST", `/exams/${exam.exam_id}/grade`);
}

// ---------------------------------------------------------------------------------------------
// The payout account: a secp256k1 (Ethereum) key, bound to the DID by both keys' signatures
// ---------------------------------------------------------------------------------------------
//
// Node's OpenSSL has SHA3 but not Ethereum's Keccak-256 (same permutation, other padding), and
// signs ECDSA only over digests it makes itself; so both are written out here. The one point
// multiplication ECDSA needs (k·G) is Node's ECDH: the "public key" of k is the point k·G.

const KECCAK_ROUND_CONSTANTS = [
  0x0000000000000001n, 0x0000000000008082n, 0x800000000000808an, 0x8000000080008000n,
  0x000000000000808bn, 0x0000000080000001n, 0x8000000080008081n, 0x8000000000008009n,
  0x000000000000008an, 0x0000000000000088n, 0x0000000080008009n, 0x000000008000000an,
  0x000000008000808bn, 0x800000000000008bn, 0x8000000000008089n, 0x8000000000008003n,
  0x8000000000008002n, 0x8000000000000080n, 0x000000000000800an, 0x800000008000000an,
  0x8000000080008081n, 0x8000000000008080n, 0x0000000080000001n, 0x8000000080008008n,
];
// Rotation offsets r[x + 5y] of the rho step.
const KECCAK_ROTATIONS = [
  0, 1, 62, 28, 27, 36, 44, 6, 55, 20, 3, 10, 43, 25, 39, 41, 45, 15, 21, 8, 18, 2, 61, 56, 14,
];
const MASK64 = (1n << 64n) - 1n;
const rotl64 = (x, n) => (n === 0 ? x : ((x << BigInt(n)) | (x >> BigInt(64 - n))) & MASK64);

/** Keccak-f[1600] on 25 64-bit lanes (BigInt), lane (x, y) at index x + 5y. */
function keccakF(lanes) {
  for (const constant of KECCAK_ROUND_CONSTANTS) {
    // theta: each lane XORs the parities of two neighbouring columns
    const c = [0, 1, 2, 3, 4].map(
      (x) => lanes[x] ^ lanes[x + 5] ^ lanes[x + 10] ^ lanes[x + 15] ^ lanes[x + 20],
    );
    for (let x = 0; x < 5; x++) {
      const d = c[(x + 4) % 5] ^ rotl64(c[(x + 1) % 5], 1);
      for (let y = 0; y < 25; y += 5) lanes[x + y] ^= d;
    }
    // rho and pi: rotate each lane, move lane (x, y) to (y, 2x + 3y)
    const b = new Array(25);
    for (let x = 0; x < 5; x++) {
      for (let y = 0; y < 5; y++) {
        b[y + 5 * ((2 * x + 3 * y) % 5)] = rotl64(lanes[x + 5 * y], KECCAK_ROTATIONS[x + 5 * y]);
      }
    }
    // chi: the one non-linear step, along rows
    for (let x = 0; x < 5; x++) {
      for (let y = 0; y < 25; y += 5) {
        lanes[x + y] = b[x + y] ^ (~b[((x + 1) % 5) + y] & MASK64 & b[((x + 2) % 5) + y]);
      }
    }
    // iota
    lanes[0] ^= constant;
  }
}

/** Ethereum's Keccak-256 (the original padding 0x01, not SHA3-256's 0x06). */
function keccak256(bytes) {
  const rate = 136;
  const padded = Buffer.alloc((Math.floor(bytes.length / rate) + 1) * rate);
  Buffer.from(bytes).copy(padded);
  padded[bytes.length] ^= 0x01;
  padded[padded.length - 1] ^= 0x80;
  const lanes = new Array(25).fill(0n);
  for (let offset = 0; offset < padded.length; offset += rate) {
    for (let i = 0; i < rate / 8; i++) lanes[i] ^= padded.readBigUInt64LE(offset + 8 * i);
    keccakF(lanes);
  }
  const out = Buffer.alloc(32);
  for (let i = 0; i < 4; i++) out.writeBigUInt64LE(lanes[i], 8 * i);
  return out;
}

const SECP256K1_N = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n;
const toBig = (bytes) => BigInt("0x" + Buffer.from(bytes).toString("hex"));
const to32 = (number) => Buffer.from(number.toString(16).padStart(64, "0"), "hex");

function modPow(base, exponent, modulus) {
  let result = 1n;
  base %= modulus;
  while (exponent > 0n) {
    if (exponent & 1n) result = (result * base) % modulus;
    base = (base * base) % modulus;
    exponent >>= 1n;
  }
  return result;
}

class EthAccount {
  constructor(privateKey) {
    this.privateKey = Buffer.from(privateKey);
    const ecdh = crypto.createECDH("secp256k1");
    ecdh.setPrivateKey(this.privateKey);
    // The address: the last 20 bytes of Keccak-256 of the public point (x || y, no 0x04).
    const point = ecdh.getPublicKey(); // 0x04 || x || y
    const lower = keccak256(point.subarray(1)).subarray(12).toString("hex");
    // EIP-55: upper-case each hex letter whose nibble in Keccak-256(lower-case hex) is >= 8.
    const hash = keccak256(Buffer.from(lower, "ascii")).toString("hex");
    const letters = [...lower].map((c, i) => (parseInt(hash[i], 16) >= 8 ? c.toUpperCase() : c));
    this.address = "0x" + letters.join("");
  }

  /** EIP-191 personal_sign of `message` (bytes): ECDSA over Keccak-256 of
   *  "\x19Ethereum Signed Message:\n" + its length in decimal + the message, as 0x-hex of
   *  r || s || v (65 bytes, v = 27 + the parity of R.y, s in the lower half). */
  personalSign(message) {
    const prefix = Buffer.from(`\x19Ethereum Signed Message:\n${message.length}`, "utf8");
    const z = toBig(keccak256(Buffer.concat([prefix, message])));
    const d = toBig(this.privateKey);
    for (;;) {
      const k = toBig(crypto.randomBytes(32)) % SECP256K1_N; // a fresh secret nonce
      if (k === 0n) continue;
      const ecdh = crypto.createECDH("secp256k1");
      ecdh.setPrivateKey(to32(k));
      const point = ecdh.getPublicKey(); // R = k·G
      const r = toBig(point.subarray(1, 33)) % SECP256K1_N;
      let recovery = point[64] & 1;
      let s = (modPow(k, SECP256K1_N - 2n, SECP256K1_N) * (z + r * d)) % SECP256K1_N;
      if (r === 0n || s === 0n) continue;
      if (s > SECP256K1_N / 2n) {
        s = SECP256K1_N - s; // the low-s form; R's parity flips with it
        recovery ^= 1;
      }
      return "0x" + Buffer.concat([to32(r), to32(s), Buffer.from([27 + recovery])]).toString("hex");
    }
  }
}

/** The payout account next to the agent's key (FILE.eth.json, {"key": "0x…"}, mode 0600),
 *  made on first use. */
function loadEthAccount(keyFile) {
  const file = keyFile.replace(/\.json$/, "") + ".eth.json";
  if (!fs.existsSync(file)) {
    let key;
    do key = crypto.randomBytes(32); while (toBig(key) === 0n || toBig(key) >= SECP256K1_N);
    fs.writeFileSync(file, JSON.stringify({ key: "0x" + key.toString("hex") }), { mode: 0o600, flag: "wx" });
  }
  return new EthAccount(Buffer.from(JSON.parse(fs.readFileSync(file, "utf8")).key.slice(2), "hex"));
}

/** Bind the payout address (identity/payout.py): both keys sign the same bytes, JCS of the
 *  statement, the DID key with raw Ed25519 ("z" + base58btc), the payout key with EIP-191;
 *  the binding goes in the agent's own `payout.bound` entry. Teams pay (and only take) members
 *  whose address is bound. */
async function bindPayout(client, account) {
  const signer = client.signer;
  const info = await client.call("GET", `/agents/${signer.did}/next-seq`);
  const statement = {
    type: "PayoutAddressBinding",
    did: signer.did,
    address: account.address,
    chainId: info.chain_id,
    nonce: crypto.randomBytes(16).toString("hex"),
    issuedAt: info.server_time.replace(/\.\d{3}Z$/, "Z"), // to the second
  };
  const message = Buffer.from(jcs(statement), "utf8");
  const binding = {
    statement,
    didSignature: "z" + base58btc(signer.sign(message)),
    addressSignature: account.personalSign(message),
  };
  const entry = await client.entry("payout.bound", signer.did, { binding });
  const bound = await client.call("POST", `/agents/${signer.did}/payout`, { entry });
  return bound.address;
}

// ---------------------------------------------------------------------------------------------
// The work: capability `arithmetic`, exactly (identity/challenges/arithmetic.py)
// ---------------------------------------------------------------------------------------------

/** An item the agent cannot answer; `status` is the HTTP status /run replies with. */
class TaskError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function gcd(a, b) {
  a = a < 0n ? -a : a;
  b = b < 0n ? -b : b;
  while (b) [a, b] = [b, a % b];
  return a;
}

/** An exact rational number n/d (BigInt, d > 0, lowest terms). */
class Fraction {
  constructor(n, d = 1n) {
    if (d === 0n) throw new TaskError(422, "cannot solve the item: division by zero");
    if (d < 0n) [n, d] = [-n, -d];
    const g = gcd(n, d) || 1n;
    this.n = n / g;
    this.d = d / g;
  }
  add(o) { return new Fraction(this.n * o.d + o.n * this.d, this.d * o.d); }
  sub(o) { return new Fraction(this.n * o.d - o.n * this.d, this.d * o.d); }
  mul(o) { return new Fraction(this.n * o.n, this.d * o.d); }
  div(o) { return new Fraction(this.n * o.d, this.d * o.n); }
  cmp(o) { const x = this.n * o.d - o.n * this.d; return x < 0n ? -1 : x > 0n ? 1 : 0; }

  /** A decimal string such as "-12.50" as an exact fraction. */
  static decimal(text) {
    const match = /^(-?)(\d+)(?:\.(\d+))?$/.exec(String(text));
    if (!match) throw new TaskError(422, `cannot solve the item: not a decimal: ${text}`);
    const digits = BigInt(match[2] + (match[3] || ""));
    return new Fraction(match[1] ? -digits : digits, 10n ** BigInt((match[3] || "").length));
  }
}

/** The answer as accord's reference agent gives it: a JSON integer when whole (and safely
 *  inside a double), else a string "p/q". The grader accepts any exact form: an integer, a
 *  decimal string or a fraction string. Never a float. */
function exactAnswer(value) {
  if (value.d === 1n) {
    const small = value.n >= -BigInt(Number.MAX_SAFE_INTEGER) && value.n <= BigInt(Number.MAX_SAFE_INTEGER);
    return small ? Number(value.n) : value.n.toString();
  }
  return `${value.n}/${value.d}`;
}

/** `value` as a decimal with at least `places` digits after the point, or null when it has no
 *  finite decimal expansion (1/3). */
function decimalText(value, places) {
  let d = value.d;
  let twos = 0;
  let fives = 0;
  while (d % 2n === 0n) { d /= 2n; twos += 1; }
  while (d % 5n === 0n) { d /= 5n; fives += 1; }
  if (d !== 1n) return null;
  places = Math.max(places, twos, fives);
  const magnitude = value.n < 0n ? -value.n : value.n;
  const scaled = (magnitude * 10n ** BigInt(places)) / value.d;
  const digits = scaled.toString().padStart(places + 1, "0");
  const sign = value.n < 0n ? "-" : "";
  if (places === 0) return sign + digits;
  return `${sign}${digits.slice(0, -places)}.${digits.slice(-places)}`;
}

/** An expression of integers, + - * / (or − × ÷) and brackets, by recursive descent. */
function evaluateExpression(source) {
  const text = String(source).replace(/\u2212/g, "-").replace(/\u00d7/g, "*").replace(/\u00f7/g, "/");
  const tokens = text.match(/\d+|[-+*/()]|\S/g) || [];
  let at = 0;
  const fail = (why) => { throw new TaskError(422, `cannot solve the item: ${why} in ${source}`); };
  const peek = () => tokens[at];
  const next = () => tokens[at++];
  function primary() {
    const token = next();
    if (token === "(") {
      const value = sum();
      if (next() !== ")") fail("an unclosed bracket");
      return value;
    }
    if (token === "-") return primary().mul(new Fraction(-1n));
    if (token === "+") return primary();
    if (token !== undefined && /^\d+$/.test(token)) return new Fraction(BigInt(token));
    return fail(`unexpected ${token === undefined ? "end" : JSON.stringify(token)}`);
  }
  function product() {
    let value = primary();
    while (peek() === "*" || peek() === "/") {
      value = next() === "*" ? value.mul(primary()) : value.div(primary());
    }
    return value;
  }
  function sum() {
    let value = product();
    while (peek() === "+" || peek() === "-") {
      value = next() === "+" ? value.add(product()) : value.sub(product());
    }
    return value;
  }
  const value = sum();
  if (at !== tokens.length) fail(`unexpected ${JSON.stringify(peek())}`);
  return value;
}

// Each unit's dimension and its size in the dimension's base unit (m, g, s).
const UNITS = {
  km: ["m", new Fraction(1000n)], m: ["m", new Fraction(1n)],
  cm: ["m", new Fraction(1n, 100n)], mm: ["m", new Fraction(1n, 1000n)],
  t: ["g", new Fraction(1000000n)], kg: ["g", new Fraction(1000n)],
  g: ["g", new Fraction(1n)], mg: ["g", new Fraction(1n, 1000n)],
  h: ["s", new Fraction(3600n)], min: ["s", new Fraction(60n)], s: ["s", new Fraction(1n)],
};

/** The exact result of sum, product, mean, min or max over decimal figures, as a string: a
 *  decimal with as many places as the most precise figure when it has a finite expansion
 *  ("120.50" + "43.19" is "163.69"), otherwise "p/q". */
function solveFigures(figures, operation) {
  if (!Array.isArray(figures) || figures.length === 0) {
    throw new TaskError(422, "cannot solve the item: no figures");
  }
  const values = figures.map((figure) => Fraction.decimal(figure));
  let places = Math.max(...figures.map((figure) => (String(figure).split(".")[1] || "").length));
  let result;
  if (operation === "sum") result = values.reduce((a, b) => a.add(b));
  else if (operation === "product") { result = values.reduce((a, b) => a.mul(b)); places = 0; }
  else if (operation === "mean") {
    result = values.reduce((a, b) => a.add(b)).div(new Fraction(BigInt(values.length)));
  }
  else if (operation === "min") result = values.reduce((a, b) => (b.cmp(a) < 0 ? b : a));
  else if (operation === "max") result = values.reduce((a, b) => (b.cmp(a) > 0 ? b : a));
  else throw new TaskError(422, `cannot solve the item: unknown figures operation ${operation}`);
  return decimalText(result, places) ?? `${result.n}/${result.d}`;
}

/** The answer to one item {item_id, capability, prompt, payload}. Reads only `payload`.
 *  Throws TaskError(422) for an item it cannot solve. */
function solve(item) {
  if (item.capability !== "arithmetic") {
    throw new TaskError(422, `cannot solve the item: this agent does arithmetic, not ${item.capability}`);
  }
  const payload = item.payload || {};
  if (payload.kind === "expression") return exactAnswer(evaluateExpression(payload.expression));
  if (payload.kind === "conversion") {
    const source = UNITS[payload.from];
    const target = UNITS[payload.to];
    if (!source || !target || source[0] !== target[0]) {
      throw new TaskError(422, `cannot solve the item: cannot convert ${payload.from} to ${payload.to}`);
    }
    return exactAnswer(Fraction.decimal(payload.value).mul(source[1]).div(target[1]));
  }
  if (payload.kind === "figures") return solveFigures(payload.figures, payload.operation);
  throw new TaskError(422, `cannot solve the item: unknown arithmetic item kind ${payload.kind}`);
}

// ---------------------------------------------------------------------------------------------
// The agent's own service: POST /run and POST /sign
// ---------------------------------------------------------------------------------------------

const MAX_REQUEST_BYTES = 1 << 20;

function say(event, fields = {}) {
  process.stdout.write(JSON.stringify({ event, ...fields }) + "\n");
}

/** Sign only a team report of its own whose answers are the ones it gave (accord/kit/server.py
 *  `check_report`). `text` is JCS of a ledger event; `openings` maps each commitment the report
 *  names (`output_sha256`) to the sealed bytes, JCS({"salt", "value"}), whose SHA-256 (hex) is
 *  that commitment. Throws TaskError(400 or 403) otherwise. */
function checkReport(me, answers, text, openings) {
  let event;
  try {
    event = parseCanonical(text);
  } catch (error) {
    throw new TaskError(400, `not one canonical event: ${error.message}`);
  }
  const keys = Object.keys(event || {}).sort().join(",");
  if (keys !== "actor,at,body,kind,seq,subject,v") throw new TaskError(400, "not one ledger event");
  const message = event.body && event.body.message;
  const isObject = typeof message === "object" && message !== null;
  if (event.actor !== me || event.kind !== "conversation.message" || !isObject) {
    throw new TaskError(403, "this agent signs only its own conversation messages");
  }
  if (message.kind !== "report" || message.speaker !== me) {
    throw new TaskError(403, "this agent signs only its own reports");
  }
  const result = message.result;
  const contributions = result && typeof result === "object" ? result.contributions || [] : [];
  if (!Array.isArray(contributions)) throw new TaskError(400, "contributions is not a list");
  for (const contribution of contributions) {
    const commitment = String(contribution.output_sha256);
    const sealed = String((openings || {})[commitment] ?? "");
    if (sha256(Buffer.from(sealed, "utf8")).toString("hex") !== commitment) {
      throw new TaskError(403, `the report names an answer not shown: ${commitment}`);
    }
    let opened;
    try {
      opened = parseCanonical(sealed);
    } catch (error) {
      throw new TaskError(403, `the sealed answer is not canonical JSON: ${error.message}`);
    }
    if (Object.keys(opened || {}).sort().join(",") !== "salt,value") {
      throw new TaskError(403, 'the sealed answer is not {"salt", "value"}');
    }
    // Any answer it gave for this part counts: two tasks may both have a part "total".
    const given = answers.get(String(contribution.part)) || new Set();
    if (contribution.agent !== me || !given.has(jcs(opened.value))) {
      throw new TaskError(403, "the report carries work this agent did not do");
    }
  }
}

function serve(signer, host, port) {
  const answers = new Map(); // item_id -> the set of JCS texts of the answers it gave for it

  const reply = (response, status, value) => {
    const data = Buffer.from(JSON.stringify(value), "utf8");
    response.writeHead(status, { "Content-Type": "application/json", "Content-Length": data.length });
    response.end(data);
  };

  const handle = (request, response, body) => {
    let parsed;
    try {
      parsed = JSON.parse(body.toString("utf8"));
    } catch (error) {
      return reply(response, 400, { error: `the request is not JSON: ${error.message}` });
    }
    try {
      if (request.url === "/run") {
        const item = parsed && parsed.item;
        if (typeof item !== "object" || item === null || Array.isArray(item)) {
          throw new TaskError(400, 'the request must be a JSON object {"item": {...}}');
        }
        const answer = solve(parsed.item);
        const key = String(parsed.item.item_id);
        answers.set(key, (answers.get(key) || new Set()).add(jcs(answer)));
        say("ran", { item_id: parsed.item.item_id, answer });
        return reply(response, 200, { answer, did: signer.did });
      }
      if (!parsed || typeof parsed.event !== "string") {
        throw new TaskError(400, 'the request must be {"event": text, "openings": {...}}');
      }
      checkReport(signer.did, answers, parsed.event, parsed.openings);
      say("signed", { subject: JSON.parse(parsed.event).subject });
      return reply(response, 200, { sig: b64url(signer.sign(Buffer.from(parsed.event, "utf8"))) });
    } catch (error) {
      if (!(error instanceof TaskError)) throw error;
      if (request.url === "/sign") say("refused", { status: error.status, reason: error.message });
      return reply(response, error.status, { error: error.message });
    }
  };

  const server = http.createServer((request, response) => {
    if (request.method === "GET" && request.url === "/health") {
      return reply(response, 200, { status: "ok", did: signer.did });
    }
    if (request.method !== "POST" || (request.url !== "/run" && request.url !== "/sign")) {
      return reply(response, 404, { error: `no route ${request.method} ${request.url}` });
    }
    const chunks = [];
    let size = 0;
    request.on("data", (chunk) => {
      size += chunk.length;
      if (size > MAX_REQUEST_BYTES) {
        reply(response, 413, { error: "the request is larger than 1 MiB" });
        request.destroy();
        return;
      }
      chunks.push(chunk);
    });
    request.on("end", () => {
      if (size > MAX_REQUEST_BYTES) return;
      try {
        handle(request, response, Buffer.concat(chunks));
      } catch (error) {
        reply(response, 500, { error: `the agent failed: ${error.message}` });
      }
    });
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve(server));
  });
}

// ---------------------------------------------------------------------------------------------
// main
// ---------------------------------------------------------------------------------------------

function parseArgs(argv) {
  const args = { host: "127.0.0.1", name: "node-agent", capability: [], items: null };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (flag === "--server") args.server = value;
    else if (flag === "--key") args.key = value;
    else if (flag === "--port") args.port = Number(value);
    else if (flag === "--host") args.host = value;
    else if (flag === "--endpoint") args.endpoint = value;
    else if (flag === "--name") args.name = value;
    else if (flag === "--capability") args.capability.push(value);
    else if (flag === "--items") args.items = Number(value);
    else throw new Error(`unknown option ${flag}`);
  }
  if (!args.server || !args.key || !Number.isInteger(args.port)) {
    throw new Error(
      "usage: node agent.js --server URL --key FILE --port P [--host H] [--endpoint URL] " +
        "[--name N] [--capability C] [--items N]",
    );
  }
  return args;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const signer = loadKey(args.key);
  const server = await serve(signer, args.host, args.port);
  const stop = () => {
    server.close();
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
  // Where teams reach it: POST {endpoint} with items, POST {its origin}/sign for signatures.
  const endpoint = args.endpoint || `http://${args.host}:${server.address().port}/run`;

  const client = new Client(args.server, signer);
  const record = await register(client, args.name, endpoint);
  say("registered", { did: signer.did, endpoint: record.endpoint, index: record.index });
  for (const capability of args.capability) {
    const graded = await sitExam(client, capability, args.items);
    say("credential", { capability, passed: graded.passed, credential_id: graded.credential_id });
  }
  const address = await bindPayout(client, loadEthAccount(args.key));
  say("payout", { address });
  say("ready", { did: signer.did, endpoint });
}

if (require.main === module) {
  main().catch((error) => {
    process.stderr.write(`${error.message}\n`);
    process.exit(1);
  });
}

module.exports = {
  b64url, base58btc, jcs, keccak256, Signer, EthAccount, loadKey, signRequest, createPresentation, solve,
};
