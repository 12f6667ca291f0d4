/* The page's state, shared by its modules (the API key and the model picked are api.js's session). */

export const state = {
  info: null, // the /info answer
  sourceName: "English", // the source language's name, from /info or the language picked; "" when detected
  languages: null, // a many-to-many model's languages, a Map of code -> short name (GET /models); null for a pair one
  run: 0, // the latest translate request; answers to older ones are dropped
  lastError: null,
  attention: null, // the /attention answer
  reference: "",
  kind: "cross",
  layer: 0, // index into attention.layers
  head: "avg", // "avg" or an index into attention.heads
  view: null, // what is drawn: {matrix, rows, cols}
  active: null, // {row, col}; either may be null
  heat: null, // heatmap geometry and elements
  hv: null, // head view elements
  hvSide: "query",
  alignments: null, // {group: [the source spans ([start, end]) each target token aligns to]}: "t" the translation,
  // "h0".. its alternatives; spans in code points, matched to /tokenize's tokens by overlap
  sourceSpans: null, // /tokenize's token spans ([start, end], code points), by token index
  alignHover: null, // the [data-align] element under the mouse
};
