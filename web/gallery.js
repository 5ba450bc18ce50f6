// The page's gallery, kept in the browser's IndexedDB (database "edge-deploy", per site origin) so that it
// survives a reload. Entries remember the sha256 of the embedder that described them: a site rebuilt with
// another embedder does not compare its descriptors with stale ones. The site's sample gallery is added the
// first time a site with that embedder is opened; "Clear" empties the gallery for good ("Restore samples"
// puts the samples back).

const DB_NAME = "edge-deploy";
const DB_VERSION = 1;

function request(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

function openDb() {
  const req = indexedDB.open(DB_NAME, DB_VERSION);
  req.onupgradeneeded = () => {
    const db = req.result;
    db.createObjectStore("gallery", { keyPath: "id", autoIncrement: true });
    db.createObjectStore("meta");
  };
  return request(req);
}

export class Gallery {
  // embedder: the embedder's sha256 (manifest.json); samples: manifest.json samples.gallery (or []).
  static async open(embedder, samples) {
    let db;
    try {
      db = await openDb();
    } catch (err) {
      throw new Error(`Gallery: the browser refused IndexedDB (${err && err.message ? err.message : err}); the gallery cannot be kept`);
    }
    const gallery = new Gallery(db, embedder, samples);
    if ((await gallery.meta("seeded")) !== embedder) {
      await gallery.addSamples();
      await gallery.setMeta("seeded", embedder);
    }
    await gallery.reload();
    return gallery;
  }

  constructor(db, embedder, samples) {
    this.db = db;
    this.embedder = embedder;
    this.samples = samples;
    this.entries = [];
    this.otherEmbedder = 0;
  }

  store(name, mode) {
    return this.db.transaction(name, mode).objectStore(name);
  }

  meta(key) {
    return request(this.store("meta", "readonly").get(key));
  }

  setMeta(key, value) {
    return request(this.store("meta", "readwrite").put(value, key));
  }

  // Every entry of this embedder, oldest first; entries of another embedder are counted, not used.
  async reload() {
    const all = await request(this.store("gallery", "readonly").getAll());
    this.entries = all.filter((e) => e.embedder === this.embedder);
    this.otherEmbedder = all.length - this.entries.length;
    return this.entries;
  }

  async add(name, descriptor, thumbnail, origin) {
    const entry = { name, descriptor: Array.from(descriptor), thumbnail, origin, embedder: this.embedder };
    await request(this.store("gallery", "readwrite").add(entry));
    return this.reload();
  }

  async addSamples() {
    for (const s of this.samples) {
      const entry = { name: s.name, descriptor: s.descriptor, thumbnail: s.thumbnail, origin: `sample: ${s.from}`, embedder: this.embedder };
      await request(this.store("gallery", "readwrite").add(entry));
    }
    return this.reload();
  }

  async clear() {
    await request(this.store("gallery", "readwrite").clear());
    return this.reload();
  }
}
