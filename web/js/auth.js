/*
 * auth - asking a person for the server's access token (SPEC §4, §7): a
 * modal dialog, shown when the server needs a token the page does not have
 * or refuses the one it has. It stays up until the server takes a token, so
 * a wrong one is answered in place; api.js keeps the token and sends it.
 * Also the "Forget token" button, shown while a token is kept.
 * Depends on api.js, dom.js.
 */
import { forgetToken, hasToken, setTokenAsker } from './api.js';
import { $ } from './dom.js';

const PROBLEMS = {
  needed: '',
  refused: 'The server refused that token. Check it and try again.',
  unreachable: 'Could not reach the server to check the token. Try again.',
};

let pending = null; // {check, resolve} while the dialog asks

function show(problem) {
  const d = $('auth-dialog');
  const box = $('auth-token');
  const msg = PROBLEMS[problem] || '';
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
  $('forget-token').hidden = false;
  resolve(t);
}

export function bindAuth() {
  setTokenAsker(askToken);
  const d = $('auth-dialog');
  $('auth-form').addEventListener('submit', submit);
  // Nothing works without the token: Escape does not dismiss the question,
  // and should the browser close the dialog anyway, it comes back.
  d.addEventListener('cancel', (ev) => { if (pending) ev.preventDefault(); });
  d.addEventListener('close', () => { if (pending) show('needed'); });
  const forget = $('forget-token');
  forget.hidden = !hasToken();
  // A reload starts clean: nothing already open keeps using the old token.
  forget.addEventListener('click', () => {
    forgetToken();
    location.reload();
  });
}
