// The session's skills for OpenClaw (seed 001 §4.7): every `skill_index` entry is put into
// `<skills dir>/<skill_id>/` (for a private gateway: the workspace's `skills/`, OpenClaw's
// highest-precedence skill location). A skill found in the shared cache (`skills_cache_dir`,
// `<id>/SKILL.md` present) is copied from there; otherwise it is asked for over IPC with
// `request get_skill_package {skill_id, version}`. The answer is either `{path}` (clawlet installed
// the package into its cache and names the directory) or the package itself, `{files: [...]}` or
// `{package: {files: [...]}}`, each file `{path, content, encoding: "utf-8" | "base64"}`.
//
// The bridge never writes into the shared cache (clawlet owns it and its locking). A package is
// written into a fresh `.<id>.partial-*` directory and renamed into place, so a half-written skill
// is never visible. A skill that cannot be had is reported (`audit_log skill_unavailable`) and
// left out; it does not fail the session.

import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

const SKILL_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const MAX_FILES = 500;
const MAX_BYTES = 20 * 1024 * 1024;

/** @param {unknown} raw */
export function validSkillId(raw) {
  return typeof raw === 'string' && SKILL_ID.test(raw) && raw !== '.' && raw !== '..' && !raw.includes('..');
}

/**
 * A package file's path: relative, normalised, inside the skill directory.
 * @param {unknown} raw
 */
export function safeRelativePath(raw) {
  if (typeof raw !== 'string' || !raw || raw.includes('\0') || raw.includes('\\')) return null;
  if (path.posix.isAbsolute(raw)) return null;
  const normal = path.posix.normalize(raw);
  if (normal === '.' || normal.startsWith('../') || normal === '..' || normal.split('/').includes('..')) return null;
  return normal;
}

/**
 * The files of a `get_skill_package` answer, decoded and checked.
 * @param {string} skillId
 * @param {any} result
 * @returns {{path: string, data: Buffer}[]}
 */
export function packageFiles(skillId, result) {
  const files = Array.isArray(result?.files) ? result.files : Array.isArray(result?.package?.files) ? result.package.files : null;
  if (!files) throw new Error(`the package of ${skillId} has no 'files' list`);
  if (files.length > MAX_FILES) throw new Error(`the package of ${skillId} has ${files.length} files (at most ${MAX_FILES})`);
  let total = 0;
  const out = [];
  for (const [index, file] of files.entries()) {
    const rel = safeRelativePath(file?.path);
    if (!rel) throw new Error(`files[${index}] of ${skillId} has an unsafe path ${JSON.stringify(file?.path)}`);
    if (typeof file.content !== 'string') throw new Error(`files[${index}] (${rel}) of ${skillId} has no string content`);
    const encoding = String(file.encoding ?? 'utf-8').toLowerCase();
    let data;
    if (encoding === 'base64') data = Buffer.from(file.content, 'base64');
    else if (encoding === 'utf-8' || encoding === 'utf8') data = Buffer.from(file.content, 'utf8');
    else throw new Error(`${rel} of ${skillId} has unsupported encoding ${JSON.stringify(file.encoding)}`);
    total += data.length;
    if (total > MAX_BYTES) throw new Error(`the package of ${skillId} is larger than ${MAX_BYTES} bytes`);
    out.push({ path: rel, data });
  }
  if (!out.some((file) => file.path === 'SKILL.md')) throw new Error(`the package of ${skillId} has no SKILL.md`);
  return out;
}

/**
 * Replace `<dir>/<id>` with what `fill(staging)` writes into a fresh staging directory.
 * @param {string} dir @param {string} id @param {(staging: string) => void} fill
 */
function installAtomically(dir, id, fill) {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const staging = path.join(dir, `.${id}.partial-${randomBytes(4).toString('hex')}`);
  try {
    fs.mkdirSync(staging, { mode: 0o700 });
    fill(staging);
    const target = path.join(dir, id);
    fs.rmSync(target, { recursive: true, force: true });
    fs.renameSync(staging, target);
    return target;
  } finally {
    fs.rmSync(staging, { recursive: true, force: true });
  }
}

/** @param {string} source a skill directory holding SKILL.md */
function copyFrom(source) {
  return (/** @type {string} */ staging) => fs.cpSync(source, staging, { recursive: true, dereference: true });
}

/**
 * @param {{index: unknown, skillsDir: string, cacheDir?: string,
 *   request: (method: string, params: Record<string, any>) => Promise<any>,
 *   notify: (method: string, params: Record<string, any>) => void}} options
 * @returns {Promise<{loaded: string[], unavailable: {skill_id: string, error: string}[]}>}
 */
export async function provisionSkills({ index, skillsDir, cacheDir, request, notify }) {
  const loaded = [];
  const unavailable = [];
  const entries = Array.isArray(index) ? index : [];
  for (const entry of entries) {
    const id = entry?.skill_id ?? entry?.id;
    const version = typeof entry?.version === 'string' && entry.version ? entry.version : 'latest';
    if (!validSkillId(id)) {
      unavailable.push({ skill_id: String(id), error: 'invalid skill_id' });
      continue;
    }
    try {
      let source = 'cache';
      const cached = cacheDir ? path.join(cacheDir, id) : null;
      if (cached && fs.existsSync(path.join(cached, 'SKILL.md'))) {
        installAtomically(skillsDir, id, copyFrom(cached));
      } else {
        source = 'control_plane';
        const result = await request('get_skill_package', { skill_id: id, version });
        if (typeof result?.path === 'string' && fs.existsSync(path.join(result.path, 'SKILL.md'))) {
          installAtomically(skillsDir, id, copyFrom(result.path));
        } else {
          const files = packageFiles(id, result);
          installAtomically(skillsDir, id, (staging) => {
            for (const file of files) {
              const target = path.join(staging, ...file.path.split('/'));
              fs.mkdirSync(path.dirname(target), { recursive: true, mode: 0o700 });
              fs.writeFileSync(target, file.data, { mode: 0o600 });
            }
          });
        }
      }
      loaded.push(id);
      notify('audit_log', { event: 'skill_loaded', details: { skill_id: id, version, source } });
    } catch (err) {
      const error = err instanceof Error ? err.message : String(err);
      unavailable.push({ skill_id: id, error });
      notify('audit_log', { event: 'skill_unavailable', details: { skill_id: id, version, error } });
    }
  }
  return { loaded, unavailable };
}
