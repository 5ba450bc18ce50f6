// On-device semantic search: a BERT WordPiece tokenizer over the site's tokenizer.json (what the `tokenizers`
// package runs natively: BertNormalizer, BertPreTokenizer, WordPiece, "[CLS] text [SEP]"), a sentence encoder
// whose graph pools and L2-normalises (all-MiniLM-L6-v2 as benchmarks/byom_minilm.py exports it), and cosine
// ranking of the site's sentences.

import { escapeRegex } from "./text.js";

const CJK = [
  [0x4e00, 0x9fff], [0x3400, 0x4dbf], [0x20000, 0x2a6df], [0x2a700, 0x2b73f],
  [0x2b740, 0x2b81f], [0x2b920, 0x2ceaf], [0xf900, 0xfaff], [0x2f800, 0x2fa1f],
];
const isCjk = (cp) => CJK.some(([lo, hi]) => cp >= lo && cp <= hi);
const isWhitespace = (c) => c === " " || c === "\t" || c === "\n" || c === "\r" || /\s/u.test(c);
const isControl = (c) => c !== "\t" && c !== "\n" && c !== "\r" && /\p{C}/u.test(c);
// tokenizers' BERT punctuation: ASCII punctuation (which includes $ + < = > ^ ` | ~) or any Unicode P*
const isPunctuation = (c) => /[!-/:-@[-`{-~]/.test(c) || /\p{P}/u.test(c);

export class WordPieceTokenizer {
  constructor(json) {
    const model = json.model;
    if (model.type !== "WordPiece") throw new Error(`tokenizer.json: model.type = '${model.type}'; expected 'WordPiece'`);
    const norm = json.normalizer || {};
    if (norm.type !== "BertNormalizer") throw new Error(`tokenizer.json: normalizer '${norm.type}'; expected 'BertNormalizer'`);
    this.vocab = new Map(Object.entries(model.vocab));
    this.unk = this.id(model.unk_token);
    this.prefix = model.continuing_subword_prefix;
    this.maxChars = model.max_input_chars_per_word;
    this.lowercase = norm.lowercase;
    this.stripAccents = norm.strip_accents === null || norm.strip_accents === undefined ? norm.lowercase : norm.strip_accents;
    this.cleanText = norm.clean_text;
    this.chinese = norm.handle_chinese_chars;
    this.cls = this.id("[CLS]");
    this.sep = this.id("[SEP]");
    this.pad = json.padding ? json.padding.pad_id : this.id("[PAD]");
    this.added = new Map(json.added_tokens.map((t) => [t.content, t.id]));
    const names = [...this.added.keys()].sort((a, b) => b.length - a.length).map(escapeRegex);
    this.addedSplit = new RegExp(`(${names.join("|")})`);
  }

  id(token) {
    const id = this.vocab.get(token);
    if (id === undefined) throw new Error(`tokenizer.json: no id for '${token}'`);
    return id;
  }

  normalize(text) {
    let out = "";
    for (const c of text) {
      const cp = c.codePointAt(0);
      if (this.cleanText && (cp === 0 || cp === 0xfffd || isControl(c))) continue;
      if (this.cleanText && isWhitespace(c)) out += " ";
      else if (this.chinese && isCjk(cp)) out += ` ${c} `;
      else out += c;
    }
    if (this.stripAccents) out = out.normalize("NFD").replace(/\p{Mn}/gu, "");
    return this.lowercase ? out.toLowerCase() : out;
  }

  // BertPreTokenizer: split on whitespace (dropped) and around every punctuation character (kept).
  words(text) {
    const words = [];
    let word = "";
    for (const c of text) {
      if (isWhitespace(c) || isPunctuation(c)) {
        if (word) words.push(word);
        word = "";
        if (!isWhitespace(c)) words.push(c);
      } else {
        word += c;
      }
    }
    if (word) words.push(word);
    return words;
  }

  // WordPiece: greedy longest match first; a word with a piece out of the vocabulary is one [UNK].
  pieces(word) {
    const chars = Array.from(word);
    if (chars.length > this.maxChars) return [this.unk];
    const ids = [];
    for (let start = 0; start < chars.length; ) {
      let end = chars.length;
      let found;
      for (; end > start; end--) {
        const piece = (start > 0 ? this.prefix : "") + chars.slice(start, end).join("");
        found = this.vocab.get(piece);
        if (found !== undefined) break;
      }
      if (found === undefined) return [this.unk];
      ids.push(found);
      start = end;
    }
    return ids;
  }

  // The ids of "[CLS] text [SEP]", without truncation or padding.
  encode(text) {
    const ids = [this.cls];
    for (const part of text.split(this.addedSplit)) {
      if (!part) continue;
      if (this.added.has(part)) {
        ids.push(this.added.get(part));
        continue;
      }
      for (const word of this.words(this.normalize(part))) ids.push(...this.pieces(word));
    }
    ids.push(this.sep);
    return ids;
  }

  // input_ids and attention_mask of one sentence at the encoder's fixed length: truncated keeping [SEP] last.
  encodeFixed(text, seq) {
    let ids = this.encode(text);
    if (ids.length > seq) ids = [...ids.slice(0, seq - 1), this.sep];
    const mask = ids.map(() => 1);
    while (ids.length < seq) {
      ids.push(this.pad);
      mask.push(0);
    }
    return { ids, mask };
  }
}

export class SentenceEncoder {
  constructor(ort, session, tokenizer, seq) {
    this.ort = ort;
    this.session = session;
    this.tokenizer = tokenizer;
    this.seq = seq;
  }

  async embed(text) {
    const { ids, mask } = this.tokenizer.encodeFixed(text, this.seq);
    const tensor = (values) => new this.ort.Tensor("int64", BigInt64Array.from(values, (v) => BigInt(v)), [1, this.seq]);
    const out = await this.session.run({ input_ids: tensor(ids), attention_mask: tensor(mask) });
    const vector = out[this.session.outputNames[0]].data;
    return { ids, vector: Float32Array.from(vector) };
  }
}

// Indices of the k vectors most similar to `query` (all are unit length: cosine = dot product), best first.
export function rank(query, vectors, k) {
  const scores = vectors.map((v, index) => {
    let dot = 0;
    for (let i = 0; i < v.length; i++) dot += v[i] * query[i];
    return { index, score: dot };
  });
  scores.sort((a, b) => b.score - a.score || a.index - b.index);
  return scores.slice(0, k);
}
