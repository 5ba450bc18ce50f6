// SmolLM2 in the browser: a byte-level BPE tokenizer over the site's tokenizer.json (the same file the
// native edge/text uses through the `tokenizers` package) and greedy decoding with the ONNX decoder's KV
// cache, as edge/text/generator.py does.

const GPT2_SPLIT = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

function bytesToUnicode() {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n);
      n++;
    }
  }
  const enc = new Array(256);
  bs.forEach((b, i) => {
    enc[b] = String.fromCodePoint(cs[i]);
  });
  return enc;
}

export function escapeRegex(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

export class Tokenizer {
  constructor(json) {
    const model = json.model;
    if (model.type !== "BPE") throw new Error(`tokenizer.json: model.type = '${model.type}'; expected 'BPE'`);
    this.vocab = new Map(Object.entries(model.vocab));
    this.inverse = new Map([...this.vocab].map(([k, v]) => [v, k]));
    this.ranks = new Map(model.merges.map((m, i) => [Array.isArray(m) ? m.join(" ") : m, i]));
    this.added = new Map(json.added_tokens.map((t) => [t.content, t]));
    for (const t of json.added_tokens) this.inverse.set(t.id, t.content);
    this.special = new Set(json.added_tokens.filter((t) => t.special).map((t) => t.id));
    const names = [...this.added.keys()].sort((a, b) => b.length - a.length).map(escapeRegex);
    this.addedSplit = new RegExp(`(${names.join("|")})`);
    this.byteEnc = bytesToUnicode();
    this.byteDec = new Map(this.byteEnc.map((c, b) => [c, b]));
    this.cache = new Map();
  }

  bpe(word) {
    const hit = this.cache.get(word);
    if (hit) return hit;
    let parts = Array.from(word);
    while (parts.length > 1) {
      let best = -1;
      let bestRank = Infinity;
      for (let i = 0; i < parts.length - 1; i++) {
        const r = this.ranks.get(`${parts[i]} ${parts[i + 1]}`);
        if (r !== undefined && r < bestRank) {
          bestRank = r;
          best = i;
        }
      }
      if (best < 0) break;
      const [a, b] = [parts[best], parts[best + 1]];
      const merged = [];
      for (let i = 0; i < parts.length; i++) {
        if (i < parts.length - 1 && parts[i] === a && parts[i + 1] === b) {
          merged.push(a + b);
          i++;
        } else {
          merged.push(parts[i]);
        }
      }
      parts = merged;
    }
    const ids = parts.map((p) => {
      const id = this.vocab.get(p);
      if (id === undefined) throw new Error(`tokenizer.json: no id for the BPE piece '${p}'`);
      return id;
    });
    this.cache.set(word, ids);
    return ids;
  }

  encode(text) {
    const ids = [];
    const utf8 = new TextEncoder();
    for (const segment of text.split(this.addedSplit)) {
      if (!segment) continue;
      const added = this.added.get(segment);
      if (added) {
        ids.push(added.id);
        continue;
      }
      for (const piece of segment.match(/\p{N}|[^\p{N}]+/gu) || []) {
        for (const word of piece.match(GPT2_SPLIT) || []) {
          const mapped = Array.from(utf8.encode(word), (b) => this.byteEnc[b]).join("");
          ids.push(...this.bpe(mapped));
        }
      }
    }
    return ids;
  }

  decode(ids) {
    const bytes = [];
    for (const id of ids) {
      if (this.special.has(id)) continue;
      for (const ch of this.inverse.get(id) || "") {
        const b = this.byteDec.get(ch);
        if (b !== undefined) bytes.push(b);
      }
    }
    return new TextDecoder().decode(new Uint8Array(bytes));
  }
}

export function chatPrompt(spec, prompt) {
  const f = spec.chat_format;
  const msg = (role, content) => f.message_prefix + role + f.role_suffix + content + f.message_suffix;
  const system = f.default_system != null ? msg("system", f.default_system) : "";
  return system + msg("user", prompt) + f.generation_prompt;
}

function argmax(data, offset, n) {
  let best = 0;
  let value = data[offset];
  for (let i = 1; i < n; i++) {
    if (data[offset + i] > value) {
      value = data[offset + i];
      best = i;
    }
  }
  return best;
}

export class TextGenerator {
  constructor(ort, session, tokenizer, spec) {
    this.ort = ort;
    this.session = session;
    this.tokenizer = tokenizer;
    this.spec = spec;
    this.layers = session.inputNames.filter((n) => /^past_key_values\.\d+\.key$/.test(n)).length;
    this.wantsPositions = session.inputNames.includes("position_ids");
  }

  encode(text) {
    const ids = this.tokenizer.encode(text);
    return this.spec.add_bos ? [this.spec.bos_token_id, ...ids] : ids;
  }

  async step(ids, total, past) {
    const T = this.ort.Tensor;
    const i64 = (arr) => BigInt64Array.from(arr, (v) => BigInt(v));
    const feeds = {
      input_ids: new T("int64", i64(ids), [1, ids.length]),
      attention_mask: new T("int64", i64(new Array(total).fill(1)), [1, total]),
    };
    if (this.wantsPositions) {
      feeds.position_ids = new T("int64", i64(ids.map((_, i) => total - ids.length + i)), [1, ids.length]);
    }
    for (let i = 0; i < this.layers; i++) {
      feeds[`past_key_values.${i}.key`] = past[2 * i];
      feeds[`past_key_values.${i}.value`] = past[2 * i + 1];
    }
    const out = await this.session.run(feeds);
    const logits = out.logits;
    const vocab = logits.dims[2];
    const token = argmax(logits.data, (logits.dims[1] - 1) * vocab, vocab);
    const present = [];
    for (let i = 0; i < this.layers; i++) present.push(out[`present.${i}.key`], out[`present.${i}.value`]);
    return { token, present };
  }

  emptyCache(dims) {
    const past = [];
    for (let i = 0; i < 2 * this.layers; i++) past.push(new this.ort.Tensor("float32", new Float32Array(0), dims));
    return past;
  }

  // Greedy generation; onPiece(text) is called as text arrives. Returns ids, text and timings.
  async generate(prompt, maxNewTokens, onPiece) {
    const ids = this.encode(chatPrompt(this.spec, prompt));
    const [heads, headDim] = this.spec.cache_shape; // [kv_heads, head_dim], read from the graph at build time
    const shape = [1, heads, 0, headDim];
    const stops = new Set(this.spec.stop_token_ids);
    const t0 = performance.now();
    let { token, present } = await this.step(ids, ids.length, this.emptyCache(shape));
    const first = performance.now();
    const out = [];
    let emitted = "";
    let steps = 0;
    while (!stops.has(token)) {
      out.push(token);
      const text = this.tokenizer.decode(out);
      if (!text.endsWith("\ufffd") && text.length > emitted.length) {
        onPiece(text.slice(emitted.length));
        emitted = text;
      }
      if (out.length >= maxNewTokens) break;
      ({ token, present } = await this.step([token], ids.length + out.length, present));
      steps++;
    }
    const end = performance.now();
    return {
      prompt_ids: ids,
      token_ids: out,
      text: this.tokenizer.decode(out),
      ttft_ms: first - t0,
      tokens_per_s: steps && end > first ? steps / ((end - first) / 1000) : 0,
    };
  }
}
