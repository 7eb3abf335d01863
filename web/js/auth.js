/*
 * auth - asking a person for the server's access token or their API key
 * (SPEC §4, §4.4, §7), and saying who is signed in.
 * The question is a modal dialog, shown when the server needs a token the
 * page does not have or refuses the one it has. It stays up until the server
 * takes one, so a wrong one is answered in place; api.js keeps it and sends
 * it. With auth.mode "keys" the same dialog asks for "API key": each person
 * has their own, sent exactly as the shared token is.
 * Who is signed in (GET /me) shows in the sidebar's foot in "keys" and
 * "trusted-header" modes (name, and "admin" for an admin); with one shared
 * token or none there is nobody in particular to name.
 * The button under it forgets what is kept: "Forget token" for a token,
 * "Sign out" for a key; behind a signing-in proxy ("trusted-header") the page
 * keeps nothing, and signing out is the proxy's business, so it is hidden.
 * Depends on api.js, dom.js.
 */
import { authMode, forgetToken, hasToken, setTokenAsker, whoAmI } from './api.js';
import { $, el, icon } from './dom.js';

/* What the dialog says, by what it asks for. The token's words are in
 * index.html; a key's replace them when the server is in "keys" mode. */
const WORDS = {
  token: {
    refused: 'The server refused that token. Check it and try again.',
    unreachable: 'Could not reach the server to check the token. Try again.',
  },
  keys: {
    title: 'API key',
    why: () => ['This server gives each person an API key of their own (whoever runs it makes one with ',
      el('code', { text: 'reflexor users add NAME' }), '); this browser keeps yours once given.'],
    label: 'API key',
    submit: 'Sign in',
    refused: 'The server refused that API key. Check it and try again.',
    unreachable: 'Could not reach the server to check the API key. Try again.',
  },
};
const SIGN_OUT_ICON = ['M15 4h3a2 2 0 0 1 2 2v12a2 2 0 0 1-2 2h-3', 'M10 17l5-5-5-5', 'M15 12H3'];

let pending = null; // {check, resolve} while the dialog asks
let worded = '';    // the mode the dialog's words are for ('' : index.html's)
let shown = '';     // the name showUser() last showed

const words = () => WORDS[authMode() === 'keys' ? 'keys' : 'token'];

/* Key words for a server in "keys" mode, once; index.html's are the token's. */
function wordDialog() {
  if (authMode() !== 'keys' || worded === 'keys') return;
  const w = WORDS.keys;
  $('auth-title').textContent = w.title;
  $('auth-why').replaceChildren(...w.why());
  document.querySelector('label[for="auth-token"]').textContent = w.label;
  $('auth-submit').textContent = w.submit;
  worded = 'keys';
}

function show(problem) {
  const d = $('auth-dialog');
  const box = $('auth-token');
  const msg = words()[problem] || '';
  wordDialog();
  $('auth-error').textContent = msg;
  $('auth-error').hidden = !msg;
  box.setAttribute('aria-invalid', problem === 'refused' ? 'true' : 'false');
  if (!d.open) d.showModal();
  box.focus();
}

/* The asker api.js calls: resolves to a token that `check` accepted. */
function askToken(why, check) {
  return new Promise((resolve) => {
    pending = { check, resolve };
    $('auth-token').value = '';
    show(why);
  });
}

/* The foot's sign-out button: its words follow the mode. */
function renderForget() {
  const btn = $('forget-token');
  const keys = authMode() === 'keys';
  btn.hidden = !hasToken() || authMode() === 'trusted-header';
  if (keys && btn.dataset.mode !== 'keys') {
    btn.dataset.mode = 'keys';
    btn.title = 'Forget the API key this browser keeps; the page asks for one again';
    btn.replaceChildren(icon(SIGN_OUT_ICON), el('span', { text: 'Sign out' }));
  }
}

/* Who the server says we are, in the sidebar's foot; nothing where there is
 * nobody in particular (one token, or none) or the server cannot say. */
export async function showUser() {
  const box = $('who');
  renderForget();
  const mode = authMode();
  if (mode !== 'keys' && mode !== 'trusted-header') { box.hidden = true; return; }
  let me = null;
  try { me = await whoAmI(); } catch { /* a server from before /me, or down */ }
  const name = typeof me?.name === 'string' ? me.name : '';
  // Another person's key in place of a refused one: nothing of the one
  // before (their chat list, their open chat) stays on screen.
  if (shown && name && name !== shown) { restart(true); return; }
  shown = name;
  box.hidden = !name;
  if (!name) return;
  const admin = me.admin === true;
  $('who-avatar').textContent = [...name][0].toUpperCase();
  $('who-name').textContent = name;
  $('who-admin').hidden = !admin;
  box.title = `Signed in as ${name}${admin ? ' (an admin: sees every chat)' : ''}`;
}

async function submit(ev) {
  ev.preventDefault();
  const box = $('auth-token');
  const t = box.value.trim(); // a pasted token often brings a newline or space
  if (!pending || !t) return;
  const btn = $('auth-submit');
  btn.disabled = true;
  let problem = '';
  try {
    if (!(await pending.check(t))) problem = 'refused';
  } catch {
    problem = 'unreachable';
  }
  btn.disabled = false;
  if (problem) {
    if (problem === 'refused') box.value = '';
    show(problem);
    return;
  }
  const { resolve } = pending;
  pending = null;
  $('auth-dialog').close();
  resolve(t);
  // api.js keeps the new token once this resolution has run: then ask who
  // it belongs to (another person's key may replace a refused one).
  setTimeout(showUser, 0);
}

/* Start the page again; `fresh`: at the newest chat, not this address. */
function restart(fresh) {
  if (fresh) history.replaceState(null, '', location.pathname + location.search);
  // A reload starts clean: nothing already open keeps using the old token.
  location.reload();
}

/* Forget the token or key and start again from the question. A key is a
 * person's: the next one to sign in here starts at their own newest chat,
 * not at the address of this one's. */
function signOut() {
  const keys = authMode() === 'keys';
  forgetToken();
  restart(keys);
}

export function bindAuth() {
  setTokenAsker(askToken);
  const d = $('auth-dialog');
  $('auth-form').addEventListener('submit', submit);
  // Nothing works without the token: Escape does not dismiss the question,
  // and should the browser close the dialog anyway, it comes back.
  d.addEventListener('cancel', (ev) => { if (pending) ev.preventDefault(); });
  d.addEventListener('close', () => { if (pending) show('needed'); });
  // Shown by showUser() once the server said its mode (and so the words).
  $('forget-token').hidden = true;
  $('forget-token').addEventListener('click', signOut);
}
