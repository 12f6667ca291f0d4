/* Character spans. The server's offsets (token and word spans, alignment spans) count Unicode code points, as Python
 * indexes a string; a JavaScript string is indexed by UTF-16 code units, and an astral character (😀, 𝐀) is one code
 * point but two code units. Every offset that indexes a JavaScript string goes through utf16Offsets. */

/** The code-point -> UTF-16 index map of text, built once: a function of a code-point offset (clamped to the text). */
export function utf16Offsets(text) {
  const at = [0];
  for (const ch of text) at.push(at[at.length - 1] + ch.length); // ch: one code point, 1 or 2 code units
  return (i) => at[Math.min(Math.max(0, i), at.length - 1)];
}

/** Whether the spans [start, end) a and b share a character (two empty spans: whether they are the same place). */
export const overlaps = (a, b) => (a[0] < b[1] && b[0] < a[1]) || (a[0] === a[1] && b[0] === b[1] && a[0] === b[0]);
