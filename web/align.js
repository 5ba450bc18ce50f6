// dlib's 5-point shape predictor and dlib-exact chip extraction: ports of edge/face/shape5.py and
// edge/face/align.py (align_chip_dlib5 / warp_chip / pyramid_down_2 / _bilinear).

const f = Math.fround;

// dlib's HOG box from the MTCNN box: see MTCNN_TO_HOG_BOX in edge/face/shape5.py (BlazeFace's map comes
// from the manifest).
export const MTCNN_TO_HOG_BOX = [-0.007, 0.055, 0.968];
const DLIB5_TEMPLATE = [
  [0.8595674595992, 0.2134981538014],
  [0.6460604764104, 0.2289674387677],
  [0.1205750620789, 0.2137274526848],
  [0.3340850613712, 0.2290642403242],
  [0.4901123135679, 0.6277975316475],
];

// Python's round(): halves to even.
function pyRound(x) {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

export function hogLikeRect(box, boxMap = MTCNN_TO_HOG_BOX) {
  const [x1, y1, x2, y2] = box;
  const meanSide = (x2 - x1 + (y2 - y1)) / 2.0;
  const [dx, dy, k] = boxMap;
  const cx = (x1 + x2) / 2 + dx * meanSide;
  const cy = (y1 + y2) / 2 + dy * meanSide;
  const side = k * meanSide;
  const left = pyRound(cx - side / 2);
  const top = pyRound(cy - side / 2);
  const s = Math.max(pyRound(side), 1);
  return [left, top, left + s - 1, top + s - 1];
}

// Least-squares similarity (rotation + scale, no reflection) src -> dst, optional weights.
// Closed form of the 2-D Umeyama solution: returns [[a, -b, tx], [b, a, ty]] as [m00, m01, m02, m10, m11, m12].
function similarity(src, dst, weights) {
  const n = src.length;
  const w = weights ? weights.slice() : new Array(n).fill(1);
  const total = w.reduce((s, v) => s + v, 0);
  for (let i = 0; i < n; i++) w[i] /= total;
  let msx = 0;
  let msy = 0;
  let mdx = 0;
  let mdy = 0;
  for (let i = 0; i < n; i++) {
    msx += w[i] * src[i][0];
    msy += w[i] * src[i][1];
    mdx += w[i] * dst[i][0];
    mdy += w[i] * dst[i][1];
  }
  let varS = 0;
  let c00 = 0;
  let c01 = 0;
  let c10 = 0;
  let c11 = 0;
  for (let i = 0; i < n; i++) {
    const sx = src[i][0] - msx;
    const sy = src[i][1] - msy;
    const dx = dst[i][0] - mdx;
    const dy = dst[i][1] - mdy;
    varS += w[i] * (sx * sx + sy * sy);
    c00 += w[i] * dx * sx;
    c01 += w[i] * dx * sy;
    c10 += w[i] * dy * sx;
    c11 += w[i] * dy * sy;
  }
  if (!(varS > 0)) return [1, 0, mdx - msx, 0, 1, mdy - msy];
  const a = (c00 + c11) / varS;
  const b = (c10 - c01) / varS;
  return [a, -b, mdx - (a * msx - b * msy), b, a, mdy - (b * msx + a * msy)];
}

export class ShapePredictor {
  // model: {initial [P*2], splitIdx [L*T*S*2], splitThresh [L*T*S], leafValues [L*T*(S+1)*P*2],
  //         anchorIdx [L*F], deltas [L*F*2], levels, trees, splits, points, features}
  constructor(model) {
    Object.assign(this, model);
    this.depth = Math.round(Math.log2(this.splits + 1));
  }

  predict(rgb, h, w, rect) {
    const [left, top, right, bottom] = rect;
    const ex = right - left;
    const ey = bottom - top;
    const P = this.points;
    const F = this.features;
    const T = this.trees;
    const S = this.splits;
    const init = Array.from({ length: P }, (_, i) => [this.initial[2 * i], this.initial[2 * i + 1]]);
    const shape = Float32Array.from(this.initial);
    const feats = new Float32Array(F);
    for (let level = 0; level < this.levels; level++) {
      const cur = Array.from({ length: P }, (_, i) => [shape[2 * i], shape[2 * i + 1]]);
      const m = similarity(init, cur).map(f);
      for (let k = 0; k < F; k++) {
        const d0 = this.deltas[(level * F + k) * 2];
        const d1 = this.deltas[(level * F + k) * 2 + 1];
        const a = this.anchorIdx[level * F + k];
        const ux = f(f(f(d0 * m[0]) + f(d1 * m[1])) + shape[2 * a]);
        const uy = f(f(f(d0 * m[3]) + f(d1 * m[4])) + shape[2 * a + 1]);
        const px = Math.floor(left + ux * ex + 0.5);
        const py = Math.floor(top + uy * ey + 0.5);
        if (px >= 0 && px < w && py >= 0 && py < h) {
          const o = (py * w + px) * 3;
          feats[k] = Math.floor((rgb[o] + rgb[o + 1] + rgb[o + 2]) / 3);
        } else {
          feats[k] = 0;
        }
      }
      for (let t = 0; t < T; t++) {
        const base = (level * T + t) * S;
        let node = 0;
        for (let d = 0; d < this.depth; d++) {
          const i0 = this.splitIdx[(base + node) * 2];
          const i1 = this.splitIdx[(base + node) * 2 + 1];
          node = f(feats[i0] - feats[i1]) > this.splitThresh[base + node] ? 2 * node + 1 : 2 * node + 2;
        }
        const leaf = ((level * T + t) * (S + 1) + (node - S)) * P * 2;
        for (let q = 0; q < 2 * P; q++) shape[q] = f(shape[q] + this.leafValues[leaf + q]);
      }
    }
    return Array.from({ length: P }, (_, i) => [
      Math.floor(left + shape[2 * i] * ex + 0.5),
      Math.floor(top + shape[2 * i + 1] * ey + 0.5),
    ]);
  }
}

// Affine chip -> image map as dlib's chip_details (see _chip_to_image in edge/face/align.py).
function chipToImage(template, pts, size) {
  const t = similarity(template, pts);
  const scale = Math.hypot(t[0], t[3]);
  const cos = t[0] / scale;
  const sin = t[3] / scale;
  const cx = t[0] * (size / 2) + t[1] * (size / 2) + t[2];
  const cy = t[3] * (size / 2) + t[4] * (size / 2) + t[5];
  const step = (size * scale - 1.0) / (size - 1);
  const half = (size - 1) / 2.0;
  const l00 = step * cos;
  const l01 = step * -sin;
  const l10 = step * sin;
  const l11 = step * cos;
  return [l00, l01, cx - (l00 * half + l01 * half), l10, l11, cy - (l10 * half + l11 * half)];
}

export function alignChipDlib5(rgb, h, w, points5, size = 150, padding = 0.25) {
  const template = DLIB5_TEMPLATE.map(([x, y]) => [
    ((padding + x) / (2.0 * padding + 1.0)) * size,
    ((padding + y) / (2.0 * padding + 1.0)) * size,
  ]);
  return warpChip(rgb, h, w, chipToImage(template, points5, size), size);
}

export function pyramidDown2(img, h, w) {
  if (h <= 8 || w <= 8) return { data: new Uint8Array(0), h: 0, w: 0 };
  const nr = Math.floor((h - 3) / 2);
  const nc = Math.floor((w - 3) / 2);
  const c = [1, 4, 6, 4, 1];
  const t = new Uint32Array(h * nc * 3);
  for (let r = 0; r < h; r++) {
    for (let j = 0; j < nc; j++) {
      for (let ch = 0; ch < 3; ch++) {
        let s = 0;
        for (let k = 0; k < 5; k++) s += c[k] * img[(r * w + 2 * j + k) * 3 + ch];
        t[(r * nc + j) * 3 + ch] = s;
      }
    }
  }
  const out = new Uint8Array(nr * nc * 3);
  for (let i = 0; i < nr; i++) {
    for (let j = 0; j < nc; j++) {
      for (let ch = 0; ch < 3; ch++) {
        let s = 0;
        for (let k = 0; k < 5; k++) s += c[k] * t[((2 * i + k) * nc + j) * 3 + ch];
        out[(i * nc + j) * 3 + ch] = Math.floor(s / 256);
      }
    }
  }
  return { data: out, h: nr, w: nc };
}

function bilinear(src, sh, sw, m, size) {
  const out = new Uint8Array(size * size * 3);
  if (sh < 2 || sw < 2) return out;
  for (let v = 0; v < size; v++) {
    for (let u = 0; u < size; u++) {
      const x = m[0] * u + m[1] * v + m[2];
      const y = m[3] * u + m[4] * v + m[5];
      const left = Math.floor(x);
      const top = Math.floor(y);
      if (!(left >= 0 && top >= 0 && left + 1 < sw && top + 1 < sh)) continue;
      const fx = x - left;
      const fy = y - top;
      for (let ch = 0; ch < 3; ch++) {
        const p = (r, cc) => src[(r * sw + cc) * 3 + ch];
        const val =
          (1 - fy) * ((1 - fx) * p(top, left) + fx * p(top, left + 1)) +
          fy * ((1 - fx) * p(top + 1, left) + fx * p(top + 1, left + 1));
        out[(v * size + u) * 3 + ch] = Math.min(255, Math.max(0, val));
      }
    }
  }
  return out;
}

export function warpChip(rgb, h, w, m0, size) {
  const scale = Math.hypot(m0[0], m0[3]);
  const rectSide = scale * (size - 1) + 1.0;
  let levels = 0;
  while (rectSide / 2.0 ** (levels + 1) > size) levels += 1;
  let grow = 2.0;
  for (let i = 0; i < levels; i++) grow = grow * 2 + 2;
  const half = (rectSide - 1.0) / 2.0;
  const c = (size - 1) / 2.0;
  const cx = m0[0] * c + m0[1] * c + m0[2];
  const cy = m0[3] * c + m0[4] * c + m0[5];
  const r00 = m0[0] / scale;
  const r01 = m0[1] / scale;
  const r10 = m0[3] / scale;
  const r11 = m0[4] / scale;
  const xs = [];
  const ys = [];
  for (const [sx, sy] of [[-1, -1], [1, -1], [-1, 1], [1, 1]]) {
    const a = sx * half;
    const b = sy * half;
    xs.push(cx + (a * r00 + b * r01));
    ys.push(cy + (a * r10 + b * r11));
  }
  const x0 = Math.max(0, pyRound(Math.min(...xs) - grow));
  const y0 = Math.max(0, pyRound(Math.min(...ys) - grow));
  const x1 = Math.min(w, pyRound(Math.max(...xs) + grow) + 1);
  const y1 = Math.min(h, pyRound(Math.max(...ys) + grow) + 1);
  if (x1 <= x0 || y1 <= y0) return new Uint8Array(size * size * 3);
  let sw = x1 - x0;
  let sh = y1 - y0;
  let src = new Uint8Array(sh * sw * 3);
  for (let r = 0; r < sh; r++) src.set(rgb.subarray(((y0 + r) * w + x0) * 3, ((y0 + r) * w + x1) * 3), r * sw * 3);
  let m = [m0[0], m0[1], m0[2] - x0, m0[3], m0[4], m0[5] - y0];
  for (let i = 0; i < levels; i++) {
    const down = pyramidDown2(src, sh, sw);
    src = down.data;
    sh = down.h;
    sw = down.w;
    m = m.map((v) => v / 2.0);
    m[2] -= 1.25;
    m[5] -= 0.75;
  }
  return bilinear(src, sh, sw, m, size);
}
