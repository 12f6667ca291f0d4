/* Token chips: the subword tokens in a list, each with its index, specials marked. */

import { state } from "./state.js";

/** A <tag> showing piece, its leading ▁ (word starts) in a span of class "ws". */
function pieceNode(piece, tag) {
  const node = document.createElement(tag);
  const m = /^(▁*)(.*)$/su.exec(piece);
  if (m[1]) {
    const ws = document.createElement("span");
    ws.className = "ws";
    ws.textContent = m[1];
    node.append(ws);
  }
  node.append(m[2]);
  return node;
}

/** <s>, </s>, <pad>, <unk>, and a many-to-many model's language codes (`deu_Latn`; M2M100's `__de__`). */
const isSpecial = (piece) =>
  /^<(s|\/s|pad|unk)>$/.test(piece) || Boolean(state.languages?.has(piece.replace(/^__(.+)__$/, "$1")));

/** Fills list with a chip per piece (titles: their tooltips); align: data for the chips alignment links. */
export function fillTokens(list, pieces, titles, align) {
  list.replaceChildren(
    ...pieces.map((piece, i) => {
      const li = pieceNode(piece, "li");
      li.dataset.index = i;
      if (isSpecial(piece)) li.classList.add("special");
      else if (align) Object.assign(li.dataset, { ...align, tokens: String(i) });
      if (titles) li.title = titles[i];
      return li;
    }),
  );
}
