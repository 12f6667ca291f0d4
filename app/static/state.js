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
  alignments: null, // {group: [source token index for each target token]}: "t" the translation, "h0".. its alternatives
  alignHover: null, // the [data-align] element under the mouse
};
