// DeepL's official Node.js client (deepl-node, unmodified) against nmt-serve's DeepL-compatible API: each call
// tests/app/test_deepl_clients.py checks, its result printed as one JSON object.
//   node calls.js SERVER_URL KEY WRONG_KEY
'use strict';
const deepl = require('deepl-node');

async function main() {
  const [serverUrl, key, wrongKey] = process.argv.slice(2);
  const options = { serverUrl, maxRetries: 0, minTimeout: 60000 };
  const translator = new deepl.Translator(key, options);
  const out = {};
  out.one = await translator.translateText('A man is riding a bike.', 'en', 'de');
  out.list = await translator.translateText(['Two dogs are playing in the snow.', 'A woman sits.'], null, 'de');
  out.french = await translator.translateText('A man is riding a bike.', 'en', 'fr');
  out.html = await translator.translateText('<p>A man is riding a <b>bike</b>.</p>', 'en', 'de', {
    tagHandling: 'html',
  });
  out.ignored = await translator.translateText('<p>A man is riding a <span>bike</span>.</p>', 'en', 'de', {
    tagHandling: 'html',
    ignoreTags: ['span'],
  });
  out.sourceLanguages = await translator.getSourceLanguages();
  out.targetLanguages = await translator.getTargetLanguages();
  out.glossaryPairs = await translator.getGlossaryLanguagePairs();

  const entries = new deepl.GlossaryEntries({ entries: { bike: 'Velo', snow: 'Pulverschnee' } });
  const created = await translator.createGlossary('node bikes', 'en', 'de', entries);
  out.created = created;
  out.fromCsv = await translator.createGlossaryWithCsv('node csv', 'en', 'de', Buffer.from('bike,Velo\n"dogs",Hunde\n'));
  out.listed = (await translator.listGlossaries()).map((g) => g.glossaryId);
  out.got = await translator.getGlossary(created.glossaryId);
  out.entries = (await translator.getGlossaryEntries(created.glossaryId)).entries();
  out.withGlossary = await translator.translateText('A man is riding a bike.', 'en', 'de', { glossary: created });
  await translator.deleteGlossary(created.glossaryId);
  await translator.deleteGlossary(out.fromCsv.glossaryId);
  try {
    await translator.getGlossary(created.glossaryId);
    out.afterDelete = 'found';
  } catch (e) {
    out.afterDelete = e.constructor.name;
  }
  out.usage = (await translator.getUsage()).character;

  try {
    await new deepl.Translator(wrongKey, options).translateText('A man.', 'en', 'de');
    out.wrongKey = 'translated';
  } catch (e) {
    out.wrongKey = e.constructor.name;
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  process.stderr.write(`${e.constructor.name}: ${e.message}\n`);
  process.exit(1);
});
